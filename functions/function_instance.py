"""One running instance of a function: :class:`FunctionInstance`.

One thread owns everything of the instance: its consumer on the function's
inputs, its producer on the output, the function object and its
:class:`~pulsar_state.functions.instance_context.InstanceContext`. For each
message, as Pulsar's Python runtime does:

1. the input is deserialized (``serde.IdentitySerDe``: text, or a number);
2. ``process(input, context)`` is called; an exception negatively
   acknowledges the message (it comes back), is counted as a user exception
   and the instance goes on;
3. what ``process`` returns is serialized and sent to the output topic and
   **then** the message is acknowledged (``None``: nothing is sent); a failed
   send negatively acknowledges it. The output carries the input's topic and
   message id as properties (``__pfn_input_topic__``, ``__pfn_input_msg_id__``:
   Pulsar's runtime's names), so a consumer can drop a copy.

A function with ``process_message`` (the stateful kit) is called through it:
it gives the output committed with the message's state change (``value``,
``properties``), and a redelivered message gives the same output again, so the
output is sent at least once and every copy is the same.

``ATMOST_ONCE`` acknowledges before ``process`` instead. The subscription is
the spec's (:class:`~pulsar_state.functions.function_spec.FunctionSpec`):
failover when in order (``retainOrdering``, ``EFFECTIVELY_ONCE``), shared
otherwise; the consumer's name is the instance id, so the instances of a
function split the partitions of a failover subscription between them.
Effectively once is the function's business (the stateful kit): the runtime
gives it one active consumer per partition, in order.

The code is the spec's ``py``, or its uploaded ``package`` fetched into the
worker's :class:`~pulsar_state.functions.package_cache.PackageCache`; a
package that cannot be fetched or is refused (its bytes are not what its
sha256 name says) is counted as a system exception and never run.
An instance that cannot start (its code does not load, a topic is refused)
ends with :attr:`FunctionInstance.error` set; the worker starts it again later.
What it has done is counted as Pulsar's runtime counts it
(:attr:`FunctionInstance.counters`, an
:class:`~pulsar_state.functions.instance_counters.InstanceCounters`): the
worker publishes the counts for ``pulsar-state functions status``.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pulsar

from pulsar_state.errors import ConfigurationError, MessageHeldBackError, PulsarStateError
from pulsar_state.functions.function_code import LoadedFunction, load_function
from pulsar_state.functions.function_spec import FunctionSpec
from pulsar_state.functions.instance_context import InstanceContext, load_serde
from pulsar_state.functions.instance_counters import InstanceCounters
from pulsar_state.functions.package_cache import PackageCache

__all__ = ["FunctionInstance"]

log = logging.getLogger(__name__)

_RECEIVE_MS = 200  # how often the thread looks at its stop flag
#: the output's properties naming its input, as Pulsar's runtime names them
INPUT_TOPIC_PROPERTY = "__pfn_input_topic__"
INPUT_MESSAGE_ID_PROPERTY = "__pfn_input_msg_id__"


def _input_properties(message: Any) -> dict[str, str]:
    """The properties of an output naming its input message (topic, serialized id)."""
    serialized = bytes(message.message_id().serialize())
    return {
        INPUT_TOPIC_PROPERTY: str(message.topic_name()),
        INPUT_MESSAGE_ID_PROPERTY: base64.urlsafe_b64encode(serialized).decode("ascii"),
    }


class FunctionInstance:
    """See the module docstring."""

    def __init__(
        self,
        spec: FunctionSpec,
        instance_id: int,
        client: pulsar.Client,
        *,
        work_dir: Path,
        consumer_name: str | None = None,
        secrets: dict[str, str] | None = None,
        packages: PackageCache | None = None,
    ) -> None:
        """``packages``: where an uploaded package (``spec.package``) or a ``py`` URL
        is fetched from and kept."""
        if not 0 <= instance_id < spec.parallelism:
            raise ValueError(
                f"instance {instance_id} of {spec.fqn} (parallelism {spec.parallelism})"
            )
        self.spec = spec
        self.instance_id = instance_id
        self.name = f"{spec.fqn}:{instance_id}"
        self._client = client
        self._work_dir = work_dir
        self._packages = packages
        self._consumer_name = consumer_name or self.name
        self.context = InstanceContext(spec, instance_id, client, secrets=secrets)
        self._stop = threading.Event()
        self._started = threading.Event()
        #: why the instance ended by itself (``None`` while it runs or after a stop)
        self.error: str | None = None
        #: what it has done (messages, exceptions), for the worker's status
        self.counters = InstanceCounters()
        self._thread = threading.Thread(target=self._run, name=f"pss-fn-{self.name}", daemon=True)

    def start(self) -> FunctionInstance:
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        """The thread runs (it may still be subscribing)."""
        return self._thread.is_alive()

    def wait_started(self, timeout_s: float) -> bool:
        """True once subscribed and ready to process (False if it ended or timed out)."""
        return self._started.wait(timeout_s) and self.alive

    def wait_ended(self, timeout_s: float) -> bool:
        """True once the thread has ended (stopped, or ended by itself)."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Finish the current message, close the consumer and producers, close the function."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("instance %s did not stop within %.0f s", self.name, timeout_s)

    # -- the thread --------------------------------------------------------------------------

    def _subscribe(self) -> Any:
        spec = self.spec
        topics: Any = list(spec.inputs) if len(spec.inputs) > 1 else spec.inputs[0]
        consumer = self._client.subscribe(
            topics,
            spec.subscription,
            consumer_type=pulsar.ConsumerType.Failover
            if spec.in_order
            else pulsar.ConsumerType.Shared,
            consumer_name=self._consumer_name,
            initial_position=(
                pulsar.InitialPosition.Earliest
                if spec.subscription_position == "Earliest"
                else pulsar.InitialPosition.Latest
            ),
        )
        for topic in spec.inputs:
            self.context.consumers[topic] = consumer
        return consumer

    def _code(self) -> str | None:
        """The local path of the code (an uploaded package fetched into the cache).

        Returns:
            what ``load_function`` reads (``None``: an importable module).

        Raises:
            PulsarStateError: the package cannot be had, or is refused (counted as a
                system exception: the instance never runs it).
        """
        try:
            if self._packages is not None:
                return self._packages.code_path(self.spec.py, self.spec.package)
            if self.spec.package is not None:
                raise ConfigurationError(f"{self.name}: no package cache for {self.spec.package}")
            return self.spec.py
        except PulsarStateError as exc:
            self.counters.on_system_exception(exc)
            raise

    def _run(self) -> None:
        consumer = producer = function = None
        try:
            function = load_function(
                self.spec.class_name, self._code(), self._work_dir, owner=self.spec.fqn
            )
            consumer = self._subscribe()
            if self.spec.output:
                producer = self._client.create_producer(self.spec.output, block_if_queue_full=True)
            log.info("instance %s runs", self.name)
            self._started.set()
            serde = load_serde("serde.IdentitySerDe")
            while not self._stop.is_set():
                try:
                    message = consumer.receive(timeout_millis=_RECEIVE_MS)
                except pulsar.Timeout:
                    continue
                self._handle(message, consumer, producer, function, serde)
        except Exception as exc:  # the instance ends; the worker starts it again later
            if not self._stop.is_set():
                self.error = repr(exc)
                log.exception("instance %s failed", self.name)
        finally:
            self._close(consumer, producer, function)

    def _handle(
        self, message: Any, consumer: Any, producer: Any, function: LoadedFunction, serde: Any
    ) -> None:
        at_most_once = self.spec.processing_guarantees == "ATMOST_ONCE"
        started = time.monotonic()
        self.counters.on_received()
        if at_most_once:
            consumer.acknowledge(message)
        self.context.message = message
        try:
            value = serde.deserialize(message.data())
            if function.process_message is not None:
                committed = function.process_message(value, self.context)
                output, properties = committed.value, dict(committed.properties)
            else:
                output = function.process(value, self.context)
                properties = _input_properties(message)
        except MessageHeldBackError as exc:  # the kit waits for an earlier message
            log.debug("instance %s: %s", self.name, exc)
            self._failed(message, consumer, at_most_once)
            return
        except Exception as exc:
            self.counters.on_user_exception(exc)
            log.warning("instance %s: message %s failed: %r", self.name, message.message_id(), exc)
            self._failed(message, consumer, at_most_once)
            return
        finally:
            self.context.message = None
        try:
            if output is not None and producer is not None:
                producer.send(serde.serialize(output), properties=properties)
        except Exception as exc:
            self.counters.on_system_exception(exc)
            log.warning(
                "instance %s: the output of %s was not sent: %r",
                self.name,
                message.message_id(),
                exc,
            )
            self._failed(message, consumer, at_most_once)
            return
        if not at_most_once:
            consumer.acknowledge(message)
        self.counters.on_processed(time.monotonic() - started)

    @staticmethod
    def _failed(message: Any, consumer: Any, at_most_once: bool) -> None:
        """A message that failed comes back (not under ``ATMOST_ONCE``: acknowledged already)."""
        if not at_most_once:
            consumer.negative_acknowledge(message)

    def _close(self, consumer: Any, producer: Any, function: LoadedFunction | None) -> None:
        for what, close in (
            ("function", function.close if function is not None else None),
            ("publish producers", self.context.flush),
            ("producer", producer.close if producer is not None else None),
            ("consumer", consumer.close if consumer is not None else None),
        ):
            if close is None:
                continue
            try:
                close()
            except Exception:
                log.warning("instance %s: closing its %s failed", self.name, what, exc_info=True)
        log.info("instance %s stopped", self.name)
