"""Review of the adaptive access mode (the default) on the real broker.

In adaptive mode a writer gains the topic with ``WaitForExclusive``, which
blocks in ``create_producer`` for up to the client's operation timeout while
another producer holds the topic; after such a timeout it fences the holder.
These tests pin down what must hold around that wait:

* ``close()`` must not return while the writer thread can still gain the topic:
  a producer gained after ``close()`` is never closed and holds the topic for
  everyone else until the client is closed.
* Several writers that timed out behind one holder that does not let go need
  one takeover between them (rarely two), not one each: the later ones would fence the live
  writer that took over (the Pulsar 4.0.8 deadlock trigger,
  docs/findings/pulsar-4.0.8-fencing-deadlock.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pulsar
import pytest
from harness import PulsarEndpoint, unique_topic
from prometheus_client import REGISTRY
from pulsar import ProducerAccessMode

from pulsar_state import PulsarMap, StateClosedError, StateConfig

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def _client(endpoint: PulsarEndpoint, operation_timeout_s: int) -> pulsar.Client:
    return pulsar.Client(
        endpoint.service_url, operation_timeout_seconds=operation_timeout_s, logger=QUIET
    )


def _topic_is_free(client: pulsar.Client, topic: str) -> bool:
    """Whether nobody holds the topic: an Exclusive producer is granted at once."""
    try:
        producer = client.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
    except (pulsar.ProducerFenced, pulsar.ProducerBusy):
        return False
    producer.close()
    return True


def _wait_for(what: str, check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what}")
        time.sleep(0.1)


def test_close_while_queued_for_the_topic_leaves_no_producer_behind(
    pulsar_endpoint: PulsarEndpoint,
) -> None:
    topic = unique_topic("adaptive-close")
    other = _client(pulsar_endpoint, 15)
    mine = _client(pulsar_endpoint, 15)  # the application's client: it stays open
    try:
        # another process holds the topic (e.g. a long write, or frozen)
        holder = other.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
        m = PulsarMap[str, int](
            mine,
            topic,
            admin_url=pulsar_endpoint.admin_url,
            config=StateConfig(operation_timeout_s=2.0),  # adaptive: the default
        )
        put = m.put("k", 1)
        time.sleep(0.5)  # the writer thread now waits in create_producer(WaitForExclusive)
        m.close()
        # the holder lets go: the queued create of the closed writer is granted
        holder.close()
        _wait_for("the put to fail", put.done, 20.0)
        with pytest.raises(StateClosedError):
            put.result(0)
        # nothing may hold the topic once its only other writer is closed
        # (before the fix: ProducerFenced for as long as `mine` stays open)
        _wait_for("the topic to be free", lambda: _topic_is_free(other, topic), 10.0)
    finally:
        mine.close()
        other.close()


def test_writers_timed_out_behind_one_holder_fence_it_once(
    pulsar_endpoint: PulsarEndpoint,
) -> None:
    topic = unique_topic("adaptive-cascade")
    other = _client(pulsar_endpoint, 15)
    clients = [_client(pulsar_endpoint, 3) for _ in range(4)]
    maps: list[PulsarMap[str, int]] = []
    try:
        # a holder that never lets go (a frozen process, a cut-off one)
        other.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
        config = StateConfig(operation_timeout_s=3.0)
        maps = [
            PulsarMap[str, int](c, topic, admin_url=pulsar_endpoint.admin_url, config=config)
            for c in clients
        ]
        labels = {"topic": topic}
        start = threading.Barrier(len(maps))
        results: dict[int, object] = {}

        def write(i: int) -> None:
            start.wait(10)
            try:
                results[i] = maps[i].put(f"w{i}", i).result(60)
            except Exception as exc:  # reported below
                results[i] = exc

        threads = [threading.Thread(target=write, args=(i,)) for i in range(len(maps))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert not any(t.is_alive() for t in threads), "a put did not finish within 60 s"
        assert all(not isinstance(r, Exception) for r in results.values()), results
        takeovers = REGISTRY.get_sample_value("pulsar_state_takeovers_total", labels) or 0.0
        fences = REGISTRY.get_sample_value("pulsar_state_fences_total", labels) or 0.0
        # one takeover evicts the holder that did not let go; the others must
        # queue behind the live writer that took over, not fence it. Without
        # that check every writer fences in turn (4 takeovers). Two writers whose
        # random turns fall within one takeover's latency (milliseconds) both
        # fence, so 2 is possible though rare (seen ~1 in 6 runs with a 0.2 s
        # spread, before it became 1 s); 3 would need three such turns together.
        assert takeovers <= 2, f"takeovers={takeovers} fences of live writers={fences}"
        with PulsarMap[str, int](other, topic, admin_url=pulsar_endpoint.admin_url) as reader:
            assert reader.items(latest=True).result(30) == {f"w{i}": i for i in range(len(maps))}
    finally:
        for m in maps:
            m.close()
        for c in clients:
            c.close()
        other.close()
