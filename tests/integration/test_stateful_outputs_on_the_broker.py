"""The stateful kit's output, effectively once, and each processing guarantee
(issue #26, items 2 and 3), on the real broker.

Instances run in child processes as a runtime runs them (``tests/kit_runtime.py``:
a real failover consumer, the kit, a real producer for the output, acks as
Pulsar's runtime makes them). One is paused between its state commit and its
output send and killed with SIGKILL; the instance that takes over must leave
every input with exactly one state effect and at least one output, every copy
identical and naming its input.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import defaultdict
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_name, wait_until
from kit_outputs import counters, keep, read_outputs, wait_counted_and_answered
from kit_runtime import InstanceSpec, run_instance

from pulsar_state import PulsarMap, StateConfig
from pulsar_state.functions.stateful import INPUT_MESSAGE_ID_PROPERTY, INPUT_TOPIC_PROPERTY

BATCH = 5


class _Instance:
    """One instance in a child process (``spawn`` or ``fork``)."""

    def __init__(self, start_method: str, spec: InstanceSpec) -> None:
        ctx = multiprocessing.get_context(start_method)
        self.ready, self.paused, self.stop = ctx.Event(), ctx.Event(), ctx.Event()
        self.results = ctx.Queue()
        self.process = ctx.Process(
            target=run_instance,
            args=(spec, self.ready, self.paused, self.stop, self.results),
            daemon=True,
        )
        self.process.start()
        assert self.ready.wait(60), f"instance {spec.name} did not start"

    def kill(self) -> None:
        assert self.process.pid is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(30)

    def finish(self) -> dict[str, int]:
        self.stop.set()
        counts: dict[str, int] = self.results.get(timeout=60)
        self.process.join(30)
        return counts

    def end(self) -> None:
        if self.process.is_alive():
            self.process.kill()
            self.process.join(30)


def _spec(endpoint: PulsarEndpoint, function: str, **kwargs: Any) -> InstanceSpec:
    return InstanceSpec(
        service_url=endpoint.service_url,
        admin_url=endpoint.admin_url,
        input_topic=f"persistent://public/default/{function}-in",
        output_topic=f"persistent://public/default/{function}-out",
        state_topic=f"persistent://public/default/{function}-state",
        subscription=f"{function}-fn",
        **kwargs,
    )


def _send_batches(producer: pulsar.Producer, texts: list[str]) -> None:
    """``texts`` in entries of ``BATCH`` messages each (one flush per batch)."""
    for start in range(0, len(texts), BATCH):
        for text in texts[start : start + BATCH]:
            producer.send_async(text.encode(), None)
        producer.flush()


def _check_outputs(
    outputs: list[tuple[str, dict[str, str]]], texts: list[str], input_topic: str
) -> dict[str, int]:
    """At least one output per input, every copy identical and naming its input;
    the running totals 1..N each once (one state effect per input). Returns the
    number of copies per input."""
    by_input: dict[str, set[tuple[str, tuple[tuple[str, str], ...]]]] = defaultdict(set)
    copies: dict[str, int] = defaultdict(int)
    for value, properties in outputs:
        text = value.split("#")[0]
        assert properties.get(INPUT_TOPIC_PROPERTY) == input_topic, properties
        assert properties.get(INPUT_MESSAGE_ID_PROPERTY), properties
        by_input[text].add((value, tuple(sorted(properties.items()))))
        copies[text] += 1
    missing = [text for text in texts if text not in by_input]
    assert not missing, f"inputs without an output: {missing}"
    differing = {text: seen for text, seen in by_input.items() if len(seen) != 1}
    assert not differing, f"copies of an output that differ: {differing}"
    totals = sorted(int(next(iter(seen))[0].split("#")[1]) for seen in by_input.values())
    assert totals == list(range(1, len(texts) + 1)), "each input counted once, in turn"
    ids = [dict(next(iter(seen))[1])[INPUT_MESSAGE_ID_PROPERTY] for seen in by_input.values()]
    assert len(set(ids)) == len(texts), "each input named by its own message id"
    return dict(copies)


@pytest.mark.parametrize(
    ("start_method", "takeover", "api"),
    [
        ("spawn", "restart", "process"),
        ("fork", "restart", "process_message"),
        ("spawn", "standby", "process_message"),
        ("fork", "standby", "process"),
    ],
)
def test_an_instance_killed_between_its_commit_and_its_output_send(
    pulsar_endpoint: PulsarEndpoint,
    client: pulsar.Client,
    start_method: str,
    takeover: str,
    api: str,
) -> None:
    """Instance A commits ``m12`` (the third of the last batch of 5 sent so far)
    and is killed (SIGKILL) before sending its output. ``restart``: a new
    instance starts after the kill. ``standby``: a second instance was subscribed
    all along and takes the partition over in the middle of a batch (its first
    messages are A's last ones again, or, if the broker hands it the partition
    from its read position, the batches sent after the kill: then the rest of
    m12's batch must not be skipped).
    Every input ends with one state effect and at least one output, the copies
    identical; ``m12``'s output included. ``api``: how the runtime calls the kit."""
    name = unique_name(f"kill-{start_method}-{takeover}")
    spec = _spec(pulsar_endpoint, name, api=api)
    texts = [f"m{i}" for i in range(30)]
    producer = client.create_producer(
        spec.input_topic,
        batching_enabled=True,
        batching_max_messages=BATCH,
        batching_max_publish_delay_ms=60_000,
    )
    first, rest = texts[:15], texts[15:]
    keep(client, spec.output_topic)
    a = _Instance(start_method, _spec(pulsar_endpoint, name, name="a", api=api, pause_on="m12"))
    b: _Instance | None = None
    try:
        _send_batches(producer, first)
        assert a.paused.wait(60), "instance A committed m12 and paused"
        if takeover == "standby":
            b = _Instance(start_method, _spec(pulsar_endpoint, name, name="b", api=api))
        a.kill()
        if takeover == "restart":
            b = _Instance(start_method, _spec(pulsar_endpoint, name, name="b", api=api))
        assert b is not None
        _send_batches(producer, rest)
        with PulsarMap[str, Any](
            client, spec.state_topic, admin_url=pulsar_endpoint.admin_url, config=StateConfig()
        ) as state:
            counts = wait_counted_and_answered(
                state,
                client,
                spec.output_topic,
                texts,
                timeout_s=120,
                interval_s=0.5,
                message="every input counted and answered",
            )
        totals = b.finish()
        b = None
        outputs = read_outputs(client, spec.output_topic)
    finally:
        a.end()
        if b is not None:
            b.end()
    assert counts == {**dict.fromkeys(texts, 1), "total": len(texts)}, "one state effect each"
    copies = _check_outputs(outputs, texts, spec.input_topic)
    assert copies["m12"] >= 1
    assert totals["duplicates"] >= 1, "the killed instance's last messages came again"
    assert totals["outputs_expired"] == 0


@pytest.mark.parametrize("guarantee", ["ATLEAST_ONCE", "ATMOST_ONCE", "EFFECTIVELY_ONCE"])
def test_a_message_that_fails_in_the_middle_of_30(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, guarantee: str
) -> None:
    """``handle`` raises on the 15th of 30 messages (once). ``ATMOST_ONCE``: the
    runtime acknowledged it on receipt; the kit skips it (counted) and the 29
    others are counted and answered. ``ATLEAST_ONCE``, ``EFFECTIVELY_ONCE``: never
    skipped; it comes back, and every message is counted once and answered."""
    name = unique_name(f"fails-{guarantee.lower().replace('_', '-')}")
    spec = _spec(pulsar_endpoint, name, guarantee=guarantee, fail_on="m14")
    texts = [f"m{i}" for i in range(30)]
    expected = [t for t in texts if t != "m14"] if guarantee == "ATMOST_ONCE" else texts
    keep(client, spec.output_topic)
    instance = _Instance("spawn", spec)
    try:
        producer = client.create_producer(spec.input_topic, batching_enabled=False)
        for text in texts:
            producer.send(text.encode())
        with PulsarMap[str, Any](
            client, spec.state_topic, admin_url=pulsar_endpoint.admin_url, config=StateConfig()
        ) as state:
            try:
                wait_until(
                    lambda: (
                        counters(state).get("total") == len(expected)
                        and state.get("processed/" + spec.input_topic, latest=True).result(30)
                        is not None
                        and state.get("counter/m29").result() == 1
                    ),
                    timeout_s=90,
                    interval_s=0.5,
                    message=f"{len(expected)} messages counted",
                )
            except AssertionError as exc:
                raise AssertionError(f"{exc}: counts {counters(state)}") from None
            counts = counters(state)
            wait_until(
                lambda: len(read_outputs(client, spec.output_topic)) >= len(expected),
                timeout_s=30,
                message="answered",
            )
        totals = instance.finish()
    finally:
        instance.end()
    assert counts == {**dict.fromkeys(expected, 1), "total": len(expected)}
    _check_outputs(read_outputs(client, spec.output_topic), expected, spec.input_topic)
    assert totals["skipped"] == (1 if guarantee == "ATMOST_ONCE" else 0)
