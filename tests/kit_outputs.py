"""What a stateful-kit function left on the broker: its counters and its outputs.

For the kit's broker tests (``test_stateful_outputs_on_the_broker.py``: instances
run as a runtime runs them; ``test_stateful_pulsar_runtime.py``: on Pulsar's own
Python runtime). The functions there count each input (``counter/<input>``) and
a running ``total``, and answer ``"<input>#<total>"``.
"""

from __future__ import annotations

from typing import Any

import pulsar
from harness import wait_until

from pulsar_state import PulsarMap


def keep(client: pulsar.Client, topic: str) -> None:
    """A subscription on ``topic``, so that the broker does not delete it while no
    producer is connected (the test broker deletes inactive topics after 5 s: an
    output topic between a kill and the restart)."""
    client.subscribe(topic, "kept", initial_position=pulsar.InitialPosition.Earliest).close()


def read_outputs(client: pulsar.Client, topic: str) -> list[tuple[str, dict[str, str]]]:
    """Every message on ``topic``: (value, properties)."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    found = []
    try:
        while reader.has_message_available():
            msg = reader.read_next(10_000)
            found.append((msg.data().decode(), dict(msg.properties())))
    finally:
        reader.close()
    return found


def counters(state: PulsarMap[str, Any]) -> dict[str, Any]:
    """The function's counters (``counter/`` taken off the keys), read latest."""
    items = state.items(latest=True).result(timeout=30)
    return {k.removeprefix("counter/"): v for k, v in items.items() if k.startswith("counter/")}


def wait_counted_and_answered(
    state: PulsarMap[str, Any],
    client: pulsar.Client,
    output_topic: str,
    texts: list[str],
    *,
    timeout_s: float,
    interval_s: float,
    message: str,
) -> dict[str, Any]:
    """Wait until the ``total`` is ``len(texts)`` and every input has an output on
    ``output_topic``; return the counters then. A timeout fails naming the inputs
    not counted once, the total and the inputs not answered."""

    def answered() -> set[str]:
        return {v.split("#")[0] for v, _ in read_outputs(client, output_topic)}

    try:
        wait_until(
            lambda: counters(state).get("total") == len(texts) and len(answered()) == len(texts),
            timeout_s=timeout_s,
            interval_s=interval_s,
            message=message,
        )
    except AssertionError as exc:
        counts = counters(state)
        raise AssertionError(
            f"{exc}: not counted once {[t for t in texts if counts.get(t) != 1]}, "
            f"total {counts.get('total')}, not answered {set(texts) - answered()}"
        ) from None
    return counters(state)
