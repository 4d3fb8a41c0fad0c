"""Order and group commit on the real broker (state/core/write/writer.py): one
thread's writes land in the order it made them, concurrent writers share
entries, a fenced write is re-run, not lost, and puts and batched writes made
without waiting land in order."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pulsar
import pytest
from harness import unique_topic

from pulsar_state import Position, PulsarMap, StateConfig, metrics

ClientFactory = Callable[[], pulsar.Client]


def test_one_threads_writes_land_in_the_order_it_made_them(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Writes made without waiting, then one more once the first is done: no
    write overtakes one made before it (say, taken off the queue by the
    writer thread but not yet sent)."""
    topic = unique_topic("order")
    m = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    try:
        m.put("k", -1).result(timeout=30)
        value = 0
        for _ in range(150):
            first = m.put("k", value)  # in flight
            queued = m.put("k", value + 1)  # queued: the writer thread takes it up
            first.result(timeout=30)
            # the writer thread may still hold the queued write, unsent
            last = m.put("k", value + 2)
            value += 3
            landed = [first.result(), queued.result(timeout=30), last.result(timeout=30)]
            assert landed == sorted(landed), f"writes landed out of order: {landed}"
            assert m.get("k").result() == value - 1
        assert m.get("k", latest=True).result(timeout=30) == value - 1
    finally:
        m.close()


def test_concurrent_writers_still_share_entries(make_client: ClientFactory, admin_url: str) -> None:
    topic = unique_topic("group")
    m = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    threads_n, per_thread = 6, 150
    landed: list[list[Position]] = [[] for _ in range(threads_n)]
    try:
        m.put("warm-up", 0).result(timeout=30)

        def writer(n: int) -> None:
            for i in range(per_thread):
                landed[n].append(m.put(f"t{n}", i).result(timeout=60))

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
            assert not t.is_alive(), "a writer thread did not finish within 120 s"
        everything = [p for one in landed for p in one]
        assert len(everything) == threads_n * per_thread
        for one in landed:  # each thread's writes in its order
            assert one == sorted(one)
        entries = {(p.ledger, p.entry) for p in everything}
        # writes made while an entry was in flight queued up and shared entries
        assert len(entries) < len(everything)
        assert m.items(latest=True).result(timeout=30) == {
            "warm-up": 0,
            **{f"t{n}": per_thread - 1 for n in range(threads_n)},
        }
    finally:
        m.close()


@pytest.mark.fencing
def test_a_fenced_write_is_rerun_not_lost(make_client: ClientFactory, admin_url: str) -> None:
    """A holds the topic and is idle; B fences it. A's next send fails; its
    writer regains the topic, settles the put (not landed) and re-runs it,
    and it lands after B's writes."""
    topic = unique_topic("fenced-rerun")
    # a keeps the topic until fenced: by default (adaptive mode) it lets go
    # after 50 ms idle or 0.5 s held, and then b takes it without fencing
    # anything (no retry: seen on a loaded machine)
    a = PulsarMap[str, str](
        make_client(),
        topic,
        admin_url=admin_url,
        config=StateConfig(idle_release_s=60.0, max_tenure_s=None),
    )
    b = PulsarMap[str, str](
        make_client(),
        topic,
        admin_url=admin_url,
        config=StateConfig(access_mode="fencing", idle_release_s=0.2),
    )
    try:
        a.put("k", "a0").result(timeout=30)
        retries = metrics.WRITE_RETRIES.labels(a.topic)
        before = retries._value.get()
        for i in range(3):
            b.put("k", f"b{i}").result(timeout=30)  # fences a
            assert a.put("k", f"a{i + 1}").result(timeout=60) is not None
            assert a.get("k").result() == f"a{i + 1}"
            assert b.get("k", latest=True).result(timeout=30) == f"a{i + 1}"
        # the guarantee is above (each of a's puts lands, after b's); that the
        # re-run path was taken at least once shows the test exercised it. Not
        # "3 times": the clean-clone run of 2026-11-27 saw 2, one round's put
        # needing no re-run (how a's fenced producer got that put through is
        # not known; every value was right)
        assert retries._value.get() - before >= 1
    finally:
        a.close()
        b.close()


def test_puts_and_batched_writes_made_without_waiting_land_in_order(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Puts (one-message entries when alone) and writes of two ops (one batch),
    made alternately by one thread without waiting, land in the order made,
    and a reader of the topic (another manager) applies them alike. A put made
    while nothing else is in flight is an entry by itself (batch index -1)."""
    topic = unique_topic("mixed")
    m = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    other = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    try:
        assert m.put("k", 0).result(timeout=30).batch == -1
        futures = []
        for i in range(1, 101):
            futures.append(m.put("k", i))
            futures.append(m.put_all({"k": -i, f"x{i}": i}))
        landed = [f.result(timeout=60) for f in futures]
        assert landed == sorted(landed), "entries landed out of the order made"
        assert m.get("k").result() == -100 and m.get("x100").result() == 100
        assert other.get("k", latest=True).result(timeout=30) == -100
        assert other.get("x1").result() == 1
        assert m.put("last", 1).result(timeout=30).batch == -1  # nothing else in flight
        assert other.get("last", latest=True).result(timeout=30) == 1
    finally:
        m.close()
        other.close()
