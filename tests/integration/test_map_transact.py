"""PulsarMap.transact: a public atomic multi-key write (issue #18 item 3).

Against the real broker: readers in another process-like client never see a
part of a transaction, concurrent transactions from two writers lose nothing,
a refused op or an exception fails the whole write, and ``reader`` returns a
result consistent with the write.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pulsar
import pytest
from harness import unique_topic, wait_until

from pulsar_state import PulsarMap, StateConfig
from pulsar_state.errors import TooManyOpsError
from pulsar_state.map.pulsar_map import MapOp


def _open(client: pulsar.Client, topic: str, admin_url: str, **kw: Any) -> PulsarMap[str, Any]:
    return PulsarMap[str, Any](client, topic, admin_url=admin_url, **kw)


def test_transact_writes_puts_and_deletes_computed_from_the_state(
    client: pulsar.Client, admin_url: str
) -> None:
    topic = unique_topic("transact")
    with _open(client, topic, admin_url) as m:
        m.put_all({"a": 1, "b": 2, "gone": 0}).result(30)

        def move(state: Mapping[str, Any]) -> list[MapOp[str, Any]]:
            assert isinstance(state, Mapping) and not isinstance(state, dict)  # read-only view
            return [
                MapOp.put("sum", state["a"] + state["b"]),
                MapOp.delete("gone"),
                MapOp.delete("never-there"),
            ]

        position = m.transact(move).result(30)
        assert m.items(latest=True).result(30) == {"a": 1, "b": 2, "sum": 3}
        assert m.manager.position.covers(position)
        # a reader's result is taken on the state right after the write
        assert m.transact(lambda s: [MapOp.put("a", 10)], reader=dict).result(30) == {
            "a": 10,
            "b": 2,
            "sum": 3,
        }
        # nothing to write: the future still completes (with a position)
        assert m.transact(lambda s: None).result(30) is not None
        assert m.transact(lambda s: []).result(30) is not None


def test_transact_fails_whole_on_bad_op_or_error(client: pulsar.Client, admin_url: str) -> None:
    topic = unique_topic("transact-bad")
    with _open(client, topic, admin_url, config=StateConfig(max_ops_per_write=5)) as m:
        m.put("keep", 1).result(30)

        def boom(state: Mapping[str, Any]) -> list[MapOp[str, Any]]:
            raise LookupError("no such thing")

        with pytest.raises(LookupError, match="no such thing"):
            m.transact(boom).result(30)
        with pytest.raises(ValueError, match="reserved"):
            m.transact(lambda s: [MapOp.put("ok", 1), MapOp.put("__pss__/x", 1)]).result(30)
        with pytest.raises(TypeError, match="MapOp"):
            m.transact(lambda s: [("ok", 1)]).result(30)  # type: ignore[list-item]
        with pytest.raises(TooManyOpsError):
            m.transact(lambda s: [MapOp.put(f"k{i}", i) for i in range(6)]).result(30)
        with pytest.raises(TypeError):
            m.transact("not callable").result(30)  # type: ignore[arg-type]
        assert m.items(latest=True).result(30) == {"keep": 1}, "a failed transact wrote something"


def test_no_reader_ever_sees_part_of_a_transaction(
    make_client: Callable[[], pulsar.Client], admin_url: str
) -> None:
    """Two writers move units between 20 accounts with transact; a reader on its
    own client checks, after every applied write it sees, that the total is
    unchanged (a partial transfer would show as a wrong total)."""
    topic = unique_topic("transact-atomic")
    accounts = {f"acct-{i:02d}": 100 for i in range(20)}
    total = sum(accounts.values())
    writers = [_open(make_client(), topic, admin_url) for _ in range(2)]
    reader = _open(make_client(), topic, admin_url)
    try:
        writers[0].put_all(accounts).result(30)
        wait_until(
            lambda: reader.size(latest=True).result(30) == 20, message="the reader sees 20 accounts"
        )
        seen: list[int] = []
        broken: list[tuple[str, int]] = []

        def check(change: Any) -> None:
            # on the tailer thread, right after a write is applied: the state is whole
            with reader.manager._tailer.lock:
                state = reader.manager._tailer.state
                got = sum(state.values())
            seen.append(got)
            if got != total:
                broken.append((str(change.position), got))

        reader.manager.add_listener(check)
        per_writer = 40

        def transfers(m: PulsarMap[str, Any], seed: int) -> None:
            for n in range(per_writer):
                src = f"acct-{(seed + n) % 20:02d}"
                dst = f"acct-{(seed + 3 * n + 1) % 20:02d}"
                if src == dst:
                    dst = f"acct-{(seed + n + 7) % 20:02d}"

                def move(s: Mapping[str, Any], src: str = src, dst: str = dst) -> list[Any]:
                    amount = min(5, s[src])
                    return [MapOp.put(src, s[src] - amount), MapOp.put(dst, s[dst] + amount)]

                m.transact(move).result(60)

        threads = [
            threading.Thread(target=transfers, args=(w, i * 5), name=f"transfers-{i}")
            for i, w in enumerate(writers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=240)
            assert not t.is_alive(), "transfers did not finish within 240 s"
        final = reader.items(latest=True).result(30)
        assert sum(final.values()) == total
        wait_until(
            lambda: len(seen) >= 2 * per_writer,
            timeout_s=30,
            message=f"the reader saw {2 * per_writer} transfers",
        )
        assert not broken, f"partial transactions seen: {broken[:5]}"
        # both writers' transfers all landed (read-modify-write under fencing loses none)
        assert all(v >= 0 for v in final.values())
    finally:
        for m in [*writers, reader]:
            m.close()


def test_transact_reader_sees_a_consistent_result_under_contention(
    make_client: Callable[[], pulsar.Client], admin_url: str
) -> None:
    """Counters incremented with transact from two writers: no lost update, and each
    writer's reader results grow with its writes (taken after each of its writes)."""
    topic = unique_topic("transact-counter")
    a, b = (_open(make_client(), topic, admin_url) for _ in range(2))
    try:
        results: dict[int, list[int]] = {0: [], 1: []}

        def bump(m: PulsarMap[str, Any], index: int) -> None:
            for _ in range(25):
                got = m.transact(
                    lambda s: [MapOp.put("n", s.get("n", 0) + 1)], reader=lambda s: s["n"]
                ).result(60)
                results[index].append(got)

        started = time.monotonic()
        threads = [threading.Thread(target=bump, args=(m, i)) for i, m in enumerate((a, b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=180)
            assert not t.is_alive(), "increments did not finish within 180 s"
        assert a.get("n", latest=True).result(30) == 50, f"after {time.monotonic() - started:.0f}s"
        for got in results.values():
            assert len(got) == 25 and got == sorted(set(got)), got
            assert got[0] >= 1 and got[-1] <= 50, got
    finally:
        a.close()
        b.close()
