"""A stateful-function instance run as a runtime runs one, in its own process:
for the kit's tests (``tests/integration/test_stateful_outputs_on_the_broker.py``).

It does what Pulsar 4.0's Python runtime (``python_instance.py``) does with a
message, per processing guarantee, with a real failover consumer and a real
producer: ``ATMOST_ONCE`` acknowledges on receipt; the others acknowledge when
the output is stored (or at once when there is none); a message whose
processing raised is negatively acknowledged. The function is called either
the way Pulsar's runtime calls it (``process``: the runtime names the input in
the output's ``__pfn_input_*`` properties itself) or the way the project's
worker does (``process_message``: the kit's :class:`CommittedOutput` carries
the value and the properties).

A test pauses the instance between the state commit and the output send
(``pause_on``): the instance sets ``paused`` and sleeps there until it is killed.
"""

from __future__ import annotations

import base64
import logging
import os
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pulsar

from pulsar_state.functions.stateful import FunctionState, StatefulFunction

GUARANTEES = {"ATLEAST_ONCE": 0, "ATMOST_ONCE": 1, "EFFECTIVELY_ONCE": 2}


@dataclass(frozen=True)
class InstanceSpec:
    service_url: str
    admin_url: str
    input_topic: str
    output_topic: str
    state_topic: str
    subscription: str
    #: the consumer's name: a failover subscription on a non-partitioned topic
    #: makes the first (by name) of its consumers the active one
    name: str = "a"
    guarantee: str = "ATLEAST_ONCE"
    #: "process" (Pulsar's runtime) or "process_message" (the project's worker)
    api: str = "process_message"
    #: the input after whose commit the instance pauses, before sending its output
    pause_on: str | None = None
    #: the input whose ``handle`` raises, the first time
    fail_on: str | None = None
    user_config: dict[str, Any] = field(default_factory=dict)
    #: the consumer's negative-ack redelivery delay (Pulsar's runtime: 60 s)
    nack_delay_ms: int = 60_000
    #: how many of the kit's first redelivery requests go unanswered (as the
    #: broker ignores one made while it waits to rewind after a failover)
    ignored_redeliveries: int = 0


class _AskedConsumer:
    """The input consumer as the kit finds it in ``context.consumers``: counts the
    redeliveries it is asked for, and drops the first ``ignored`` of them."""

    def __init__(self, consumer: Any, ignored: int) -> None:
        self._consumer = consumer
        self.ignored = ignored
        self.asked = 0

    def redeliver_unacknowledged_messages(self) -> None:
        self.asked += 1
        if self.asked > self.ignored:
            self._consumer.redeliver_unacknowledged_messages()


class CountAndEcho(StatefulFunction):
    """Counts each input and all of them; the output is ``<input>#<running total>``,
    a value that a second run of ``handle`` would not give again."""

    def __init__(self, fail_on: str | None = None) -> None:
        super().__init__()
        self.fail_on = fail_on

    def handle(self, input: Any, state: FunctionState, context: Any) -> Any:
        if input == self.fail_on:
            self.fail_on = None
            raise RuntimeError(f"{input} fails, once")
        state.incr_counter(input, 1)
        state.incr_counter("total", 1)
        return f"{input}#{state.get_counter('total')}"


def _context(spec: InstanceSpec, client: pulsar.Client, consumer: Any) -> Any:
    details = SimpleNamespace(
        tenant="public",
        namespace="default",
        name="kit-test",
        retainOrdering=True,
        processingGuarantees=GUARANTEES[spec.guarantee],
        source=SimpleNamespace(subscriptionType=1),  # failover
    )
    config = {"stateTopic": spec.state_topic, "adminUrl": spec.admin_url, **spec.user_config}
    context = SimpleNamespace(
        message=None,
        instance_config=SimpleNamespace(instance_id=0, function_details=details),
        consumers={spec.input_topic: consumer},
        get_function_tenant=lambda: "public",
        get_function_namespace=lambda: "default",
        get_function_name=lambda: "kit-test",
        get_instance_id=lambda: 0,
        get_user_config_value=config.get,
        get_secret=lambda _name: None,
        get_output_topic=lambda: spec.output_topic,
        get_pulsar_client=lambda: client,
        get_logger=lambda: logging.getLogger(f"kit-test.{spec.name}"),
    )
    context.get_current_message_topic_name = lambda: context.message.topic_name()  # noqa: PLW0108
    context.get_message_id = lambda: context.message.message_id()  # noqa: PLW0108
    return context


def run_instance(spec: InstanceSpec, ready: Any, paused: Any, stop: Any, results: Any) -> None:
    """Run until ``stop`` is set (then put the function's counts on ``results``)."""
    logging.basicConfig(level=logging.WARNING)
    client = pulsar.Client(
        spec.service_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    consumer = client.subscribe(
        spec.input_topic,
        spec.subscription,
        consumer_type=pulsar.ConsumerType.Failover,
        initial_position=pulsar.InitialPosition.Earliest,
        consumer_name=spec.name,
        negative_ack_redelivery_delay_ms=spec.nack_delay_ms,
    )
    # as Pulsar's runtime makes its output producer
    producer = client.create_producer(
        spec.output_topic,
        block_if_queue_full=True,
        batching_enabled=True,
        batching_max_publish_delay_ms=10,
        send_timeout_millis=0,
    )
    function = CountAndEcho(spec.fail_on)
    asked = _AskedConsumer(consumer, spec.ignored_redeliveries)
    context = _context(spec, client, asked)
    at_most_once = spec.guarantee == "ATMOST_ONCE"
    ready.set()
    while not stop.is_set():
        try:
            msg = consumer.receive(200)
        except pulsar.Timeout:
            continue
        if at_most_once:
            consumer.acknowledge(msg)
        context.message = msg
        text = msg.data().decode()
        try:
            if spec.api == "process":
                value = function.process(text, context)
                properties = {  # what Pulsar's runtime adds to every output
                    "__pfn_input_topic__": str(msg.topic_name()),
                    "__pfn_input_msg_id__": base64.urlsafe_b64encode(
                        msg.message_id().serialize()
                    ).decode("ascii"),
                }
            else:
                output = function.process_message(text, context)
                value, properties = output.value, output.properties
        except Exception:
            consumer.negative_acknowledge(msg)
            continue
        if text == spec.pause_on and not paused.is_set():
            paused.set()  # committed, not sent: the test kills the process here
            time.sleep(3600)
        if value is None:
            if not at_most_once:
                consumer.acknowledge(msg)
            continue

        def sent(result: Any, _id: Any, msg: Any = msg) -> None:
            if result != pulsar.Result.Ok:
                consumer.negative_acknowledge(msg)
            elif not at_most_once:
                consumer.acknowledge(msg)

        producer.send_async(str(value).encode(), sent, properties=properties)
    producer.flush()
    results.put(
        {
            "skipped": function.skipped,
            "duplicates": function.duplicates,
            "outputs_expired": function.outputs_expired,
            "redeliveries": function.redeliveries,
            "asked": asked.asked,
        }
    )
    results.close()
    results.join_thread()  # the counts are sent before the process ends
    function.close()
    client.close()
    os._exit(0)  # no destructor of anything a forked child inherited
