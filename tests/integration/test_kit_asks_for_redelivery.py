"""The stateful kit asks for a held message's redelivery itself, again and again
while it is missing (``scheduling/in_order.py``), on the real broker.

Pulsar's Python runtime negatively acknowledges a message whose ``process``
raised, and the kit holds back (and so nacks) every later message of the
partition until the failed one is done. The client redelivers a nack only after
its delay (60 s in both runtimes the kit supports), so the kit asks the input's
consumer (``context.consumers``) to redeliver. It used to ask once, 0.5 s after
the failure; a request that brought nothing back (the broker ignores one made
while it waits to rewind after a failover, seen with the SQL sink) left the
partition still until the negative-ack delay. The instance here runs as a
runtime runs it (``tests/kit_runtime.py``), with a negative-ack delay of an hour
and its consumer ignoring the kit's first request: only the kit's later
requests can bring the held messages back.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_name
from kit_outputs import keep, read_outputs, wait_counted_and_answered
from kit_runtime import InstanceSpec, run_instance

from pulsar_state import PulsarMap, StateConfig
from pulsar_state.functions.stateful import INPUT_MESSAGE_ID_PROPERTY


@pytest.mark.parametrize(
    ("api", "start_method"), [("process", "spawn"), ("process_message", "fork")]
)
def test_a_failed_message_is_asked_for_until_it_comes(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, api: str, start_method: str
) -> None:
    """``handle`` raises on the 15th of 30 messages (once); the 15 after it are
    held back and nacked. Every message is counted once and answered, well within
    the hour-long negative-ack delay, and every request the consumer got came from
    the kit: it asked again after the one that went unanswered. ``api``: how the
    runtime calls the kit (``process``: Pulsar's runtime; ``process_message``:
    ``pulsar-state worker``)."""
    function = unique_name(f"asks-again-{api.replace('_', '-')}")
    spec = InstanceSpec(
        service_url=pulsar_endpoint.service_url,
        admin_url=pulsar_endpoint.admin_url,
        input_topic=f"persistent://public/default/{function}-in",
        output_topic=f"persistent://public/default/{function}-out",
        state_topic=f"persistent://public/default/{function}-state",
        subscription=f"{function}-fn",
        api=api,
        fail_on="m14",
        nack_delay_ms=3_600_000,
        ignored_redeliveries=1,
    )
    texts = [f"m{i}" for i in range(30)]
    keep(client, spec.output_topic)
    ctx = multiprocessing.get_context(start_method)
    ready, paused, stop = ctx.Event(), ctx.Event(), ctx.Event()
    results = ctx.Queue()
    process = ctx.Process(
        target=run_instance, args=(spec, ready, paused, stop, results), daemon=True
    )
    process.start()
    try:
        assert ready.wait(60), "the instance started"
        producer = client.create_producer(spec.input_topic, batching_enabled=False)
        for text in texts:
            producer.send(text.encode())
        with PulsarMap[str, Any](
            client, spec.state_topic, admin_url=pulsar_endpoint.admin_url, config=StateConfig()
        ) as state:
            counts = wait_counted_and_answered(
                state,
                client,
                spec.output_topic,
                texts,
                timeout_s=45,  # far within the negative-ack delay (an hour)
                interval_s=0.5,
                message="every message counted and answered after the failed one",
            )
        stop.set()
        totals: dict[str, int] = results.get(timeout=60)
        process.join(30)
    finally:
        if process.is_alive():
            process.kill()
            process.join(30)
    assert counts == {**dict.fromkeys(texts, 1), "total": len(texts)}, "each counted once"
    outputs = read_outputs(client, spec.output_topic)
    assert {value.split("#")[0] for value, _ in outputs} == set(texts)
    assert all(properties.get(INPUT_MESSAGE_ID_PROPERTY) for _, properties in outputs)
    assert totals["asked"] == totals["redeliveries"], "every request came from the kit"
    assert totals["redeliveries"] >= 2, "asked again after the request that went unanswered"
