"""PulsarMap.watch (issue #17 item 4): every change, in order, after a position.

Against the real broker. The ground truth is the topic's own raw log, replayed
independently after the writes (LogFeed): a watch must report exactly those
changes of its keys, in that order, with the right old values.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from harness import unique_topic, wait_until

from pulsar_state import PulsarMap, WatchOverflowError
from pulsar_state.map.op import MapCodec, MapOp
from pulsar_state.map.watch import LogFeed, MapChange
from pulsar_state.position import START, Position
from pulsar_state.serde import JsonSerde, StrKeySerde

Seen = tuple[str, Any, Any, bool, Position]


def _open(client: pulsar.Client, topic: str, admin_url: str) -> PulsarMap[str, Any]:
    return PulsarMap[str, Any](client, topic, admin_url=admin_url)


def _log_changes(client: pulsar.Client, topic: str, keep: Callable[[str], bool]) -> list[Seen]:
    """Every change of the kept keys, from the raw log, with old values."""
    current: dict[str, Any] = {}
    out: list[Seen] = []

    def on_write(write: Any) -> None:
        for op in write.ops:
            if not keep(op.key):
                continue
            old = current.get(op.key)
            if op.is_delete:
                if op.key in current:
                    del current[op.key]
                    out.append((op.key, None, old, True, write.position))
            else:
                current[op.key] = op.value
                out.append((op.key, op.value, old, False, write.position))

    feed: LogFeed[str, Any] = LogFeed(client, topic, MapCodec(StrKeySerde(), JsonSerde()), on_write)
    try:
        feed.read_to_end(60)
    finally:
        feed.close()
    return out


def _as_tuple(c: MapChange[str, Any]) -> Seen:
    return (c.key, c.value, c.old_value, c.deleted, c.position)


def test_watch_reports_every_change_in_order_from_two_writers(
    make_client: Callable[[], pulsar.Client], admin_url: str
) -> None:
    topic = unique_topic("watch")
    writers = [_open(make_client(), topic, admin_url) for _ in range(2)]
    watcher = _open(make_client(), topic, admin_url)
    try:
        writers[0].put("before", 0).result(30)  # before the watch: not reported
        wait_until(lambda: watcher.get("before", latest=True).result(30) == 0, message="caught up")
        seen: list[MapChange[str, Any]] = []
        every: list[MapChange[str, Any]] = []
        watch = watcher.watch("w/", seen.append, prefix=True)
        all_keys = watcher.watch(None, every.append)
        per_thread = 60

        def write(m: PulsarMap[str, Any], name: str) -> None:
            futures = []
            for i in range(per_thread):
                key = f"w/{name}/{i % 4}"
                if i % 9 == 8:
                    futures.append(m.delete(key))
                else:
                    futures.append(m.put(key, {"by": name, "i": i}))
                if i % 10 == 0:
                    futures.append(m.put(f"other/{name}", i))  # outside the prefix
            for f in futures:
                f.result(60)

        threads = [
            threading.Thread(target=write, args=(w, f"{wi}-{t}"), name=f"writer-{wi}-{t}")
            for wi, w in enumerate(writers)
            for t in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=180)
            assert not t.is_alive(), "writers did not finish within 180 s"
        end = max(w.manager.position for w in writers)
        watcher.manager.read(lambda s: None, at_least=end).result(60)
        expected = [
            c
            for c in _log_changes(watcher._client, topic, lambda k: k.startswith("w/"))
            if c[0] != "before"
        ]
        assert len(expected) > 4 * per_thread * 0.8
        wait_until(
            lambda: len(seen) >= len(expected),
            timeout_s=30,
            message=f"the watch delivered {len(expected)} changes",
        )
        assert [_as_tuple(c) for c in seen] == expected
        positions = [c.position for c in seen]
        assert positions == sorted(positions)
        assert all(c.key.startswith("w/") for c in seen)
        wait_until(lambda: len(every) >= len(expected) + 8, message="the all-keys watch caught up")
        assert [_as_tuple(c) for c in every if c.key.startswith("w/")] == expected
        assert {c.key for c in every} - {c.key for c in seen} == {
            f"other/{w}-{t}" for w in range(2) for t in range(2)
        }
        assert watch.errors == 0 and watch.delivered == len(expected)
        assert watch.stop(5.0) and not watch.running
        writers[0].put("w/after-stop", 1).result(30)
        watcher.get("w/after-stop", latest=True).result(30)
        assert len(seen) == len(expected), "a stopped watch delivered"
        all_keys.stop(5.0)
    finally:
        for m in [*writers, watcher]:
            m.close()


def test_watch_from_a_position_replays_history_then_goes_live(
    client: pulsar.Client, make_client: Callable[[], pulsar.Client], admin_url: str
) -> None:
    topic = unique_topic("watch-from")
    with _open(client, topic, admin_url) as m:
        for i in range(5):
            m.put("k", i).result(30)
        mark = m.put("j", "x").result(30)
        m.delete("k").result(30)
        m.transact(lambda s: [MapOp.put("k", 100), MapOp.put("j", "y")]).result(30)
        with _open(make_client(), topic, admin_url) as late:
            seen: list[MapChange[str, Any]] = []
            got_all: list[MapChange[str, Any]] = []
            w = late.watch("k", seen.append, from_position=str(mark))
            w_all = late.watch(None, got_all.append, from_position=START)
            wait_until(lambda: len(seen) >= 2, message="history after the mark")
            m.put("k", 7).result(30)  # live, after the history
            wait_until(lambda: len(seen) >= 3, message="the live change")
            assert [(c.value, c.old_value, c.deleted) for c in seen] == [
                (None, 4, True),
                (100, None, False),
                (7, 100, False),
            ]
            assert all(c.position > mark for c in seen)
            # the transaction's two ops share one position
            wait_until(lambda: len(got_all) >= 10, message="the whole history")
            assert [(c.key, c.value) for c in got_all] == [
                *[("k", i) for i in range(5)],
                ("j", "x"),
                ("k", None),
                ("k", 100),
                ("j", "y"),
                ("k", 7),
            ]
            assert got_all[7].position == got_all[8].position
            assert w.failure is None and w_all.failure is None


def test_a_raising_callback_is_logged_and_counted_not_fatal(
    client: pulsar.Client, admin_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique_topic("watch-raise")
    with _open(client, topic, admin_url) as m:
        got: list[int] = []

        def picky(change: MapChange[str, Any]) -> None:
            if change.value % 3 == 0:
                raise RuntimeError(f"no multiples of 3: {change.value}")
            got.append(change.value)

        with caplog.at_level(logging.ERROR, logger="pulsar_state.map.watch"):
            w = m.watch("n", picky)
            for i in range(1, 13):
                m.put("n", i).result(30)
            wait_until(lambda: w.delivered + w.errors >= 12, message="12 changes handled")
        assert got == [1, 2, 4, 5, 7, 8, 10, 11]
        assert w.errors == 4 and w.delivered == 8 and w.running
        assert "watch callback" in caplog.text and "no multiples of 3" in caplog.text
        w.stop(5.0)


def test_a_watch_too_far_behind_ends_and_resumes_with_nothing_lost(
    client: pulsar.Client, admin_url: str
) -> None:
    """A callback slower than the writes: the watch's queue stops at
    ``max_pending`` writes, the watch ends after a whole write with
    WatchOverflowError, and a new watch from its position gets every change
    after it, so both together saw each change once, in order."""
    topic = unique_topic("watch-overflow")
    with _open(client, topic, admin_url) as m:
        release = threading.Event()
        first: list[tuple[str, int]] = []

        def slow(change: MapChange[str, Any]) -> None:
            release.wait(30)
            first.append((change.key, change.value))

        w = m.watch(None, slow, max_pending=5)
        m.put_all({"a": 0, "b": 0}).result(30)  # the write the callback is held in
        for i in range(1, 21):
            m.put_all({"a": i, "b": i}).result(30)  # two changes per write
        release.set()
        wait_until(lambda: not w.running, message="the watch to end on its overflow")
        assert isinstance(w.failure, WatchOverflowError), w.failure
        assert w.failure.position == w.position and str(w.position) in str(w.failure)
        # it ended between writes: both changes of its last write were delivered
        assert len(first) % 2 == 0 and first[-1][1] == first[-2][1]
        assert len(first) < 42  # it did not deliver everything

        rest: list[tuple[str, int]] = []
        again = m.watch(None, lambda c: rest.append((c.key, c.value)), from_position=w.position)
        wait_until(lambda: len(first) + len(rest) >= 42, message="all 42 changes")
        expected = [(k, i) for i in range(21) for k in ("a", "b")]
        assert first + rest == expected
        again.stop(5.0)
        with pytest.raises(ValueError, match="max_pending"):
            m.watch("k", print, max_pending=0)


def test_watch_rejects_bad_input_at_the_call(client: pulsar.Client, admin_url: str) -> None:
    topic = unique_topic("watch-bad")
    with _open(client, topic, admin_url) as m:
        with pytest.raises(ValueError, match="not a position"):
            m.watch("k", print, from_position="12-3")
        with pytest.raises(TypeError, match="callable"):
            m.watch("k", "print")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="prefix"):
            m.watch(5, print, prefix=True)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="reserved"):
            m.watch("__pss__/x", print)
        w = m.watch("k", print)
    assert not w.running, "closing the map stops its watches"
