"""The write path's guarantees under the faults that broke them (issue #25).

Each test states a guarantee of docs/state.md and provokes the fault that
broke it before the write path was rebuilt as a one-way pipeline:

- a publish whose outcome is unknown (the broker paused past the send
  timeout) is settled - landed or not, read from the log - before any other
  write is built or sent;
- one failed publish inside a group commit fails no write: each is re-run
  until its retry budget is spent;
- no lock of ours is held across a blocking client call, and none is taken
  on the client's IO thread (the first snapshot while latest reads complete);
- every callback and listener runs on the manager's callback thread, in the
  order the writes landed, so it may wait on the same map;
- a write that cannot be carried fails alone; a put racing ``close()`` is
  completed either way.

The tests that pause the broker run on the private broker of the
``fencing``-marked tests (no functions worker to disturb).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pulsar
import pytest
import requests
from harness import PulsarEndpoint, compact_topic, unique_topic, wait_until

from pulsar_state import (
    PulsarMap,
    SharedStateManager,
    StateClosedError,
    StateConfig,
)
from pulsar_state.core.log.format import write_message
from pulsar_state.core.write.tenure import TenureState

ClientFactory = Callable[[], pulsar.Client]

#: the broker pause outlives the send timeout: every publish in it is in doubt
_SEND_TIMEOUT_S = 2.0
_PAUSE_S = 2.5


def _paused_config(**overrides: Any) -> StateConfig:
    return StateConfig(
        send_timeout_s=_SEND_TIMEOUT_S,
        operation_timeout_s=10.0,
        idle_release_s=600,
        max_tenure_s=None,
        **overrides,
    )


@pytest.mark.fencing
def test_a_put_in_doubt_is_settled_before_an_update_is_built(
    broker_endpoint: PulsarEndpoint, make_client: ClientFactory, admin_url: str
) -> None:
    """Defect 1: ``put(k, 1)`` is in doubt (no ack before the send timeout)
    while ``update(k, +1)`` waits behind it. Building the update on the state
    without the put, and sending it on the same producer, gave put ok, update
    6, final 6: no serial order of the two gives that."""
    topic = unique_topic("doubt")
    m = PulsarMap[str, int](make_client(), topic, admin_url=admin_url, config=_paused_config())
    try:
        m.put("k", 5).result(timeout=30)
        with broker_endpoint.paused():
            put = m.put("k", 1)
            update = m.update("k", lambda v: (v or 0) + 1)
            time.sleep(_PAUSE_S)
        put.result(timeout=60)
        updated = update.result(timeout=60)
        final = m.get("k", latest=True).result(timeout=30)
        # put then update: 2, 2; update then put: 6, 1
        assert (updated, final) in {(2, 2), (6, 1)}, (updated, final)
        other = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
        try:
            assert other.get("k").result() == final
        finally:
            other.close()
    finally:
        m.close()


@pytest.mark.fencing
def test_a_failed_publish_in_a_split_group_fails_no_write(
    broker_endpoint: PulsarEndpoint, make_client: ClientFactory, admin_url: str
) -> None:
    """Defect 2: forty 15 KB writes queue behind a busy writer and go out as
    one group split into entries of ``max_write_bytes`` (64 KiB). The broker
    is paused, past the send timeout, as the writer builds the second entry:
    its publish fails. Before, the next entry of the group found no producer
    and the whole group failed (``writer failed: AssertionError()``). Every
    write must land exactly once."""
    topic = unique_topic("split")
    paused = threading.Event()

    def serialize(op: str) -> bytes:
        if op.startswith("w6:") and not paused.is_set():  # building the 2nd entry
            paused.set()
            broker_endpoint.pause()
            threading.Timer(_PAUSE_S, broker_endpoint.resume).start()
        return op.encode()

    manager = (
        SharedStateManager.builder(make_client(), topic, admin_url=admin_url)
        .with_op_serializer(serialize)
        .with_op_deserializer(bytes.decode)
        .with_database_initializer(list)
        .with_change_log_applier(lambda state, op: state.append(op.split(":", 1)[0]))
        .with_config(_paused_config(max_write_bytes=64 * 1024))
        .build()
    )
    try:
        manager.write(lambda _s: ["warm-up:"]).result(timeout=30)
        gate = threading.Event()
        held = manager.write(lambda _s: ["held:"] if gate.wait(30) else [])
        value = "v" * 15_000
        writes = [manager.write(lambda _s, i=i: [f"w{i}:{value}"], blind=True) for i in range(40)]
        gate.set()  # the writer takes the forty as one group
        held.result(timeout=60)
        for write in writes:
            write.result(timeout=120)
        assert paused.is_set()
        names = manager.read(list, latest=True).result(timeout=30)
        assert sorted(names) == sorted(["warm-up", "held", *[f"w{i}" for i in range(40)]])
    finally:
        broker_endpoint.resume()
        manager.close()


@pytest.mark.fencing
def test_the_first_snapshot_does_not_wedge_latest_reads(
    broker_endpoint: PulsarEndpoint, make_client: ClientFactory, admin_url: str
) -> None:
    """Defect 3: the first snapshot made its producer while holding the state
    lock. A latest read asked just before is answered first on the client's
    IO thread, which took the state lock to run the reader: the producer's
    answer behind it was never processed, and writes stalled. Here the latest
    read is asked, and the broker paused for a moment, as the snapshot is
    taken, so both answers arrive together, the read's first."""
    topic = unique_topic("snapwedge")
    reads: list[Future[int]] = []
    managers: list[SharedStateManager[dict[str, int], int]] = []

    def snapshot(state: dict[str, int]) -> bytes:
        if not reads:
            reads.append(managers[0].read(lambda s: s["n"], latest=True))
            reads[0].done()  # a look that asks the broker now, with a callback
            broker_endpoint.pause()
            threading.Timer(1.0, broker_endpoint.resume).start()
        return str(state["n"]).encode()

    manager = (
        SharedStateManager.builder(make_client(), topic, admin_url=admin_url)
        .with_op_serializer(lambda op: str(op).encode())
        .with_op_deserializer(int)
        .with_database_initializer(lambda: {"n": 0})
        .with_change_log_applier(lambda state, op: state.__setitem__("n", state["n"] + op))
        .with_snapshots(snapshot, lambda data: {"n": int(data)}, every_writes=10)
        .build()
    )
    managers.append(manager)
    try:
        for i in range(30):
            manager.write(lambda _s: [1]).result(timeout=30)
            assert manager.read(lambda s: s["n"]).result() == i + 1
        assert reads, "no snapshot was taken"
        assert reads[0].result(timeout=30) >= 10
        assert manager.read(lambda s: s["n"], latest=True).result(timeout=30) == 30
    finally:
        broker_endpoint.resume()
        manager.close()


def test_callbacks_run_on_the_callback_thread_in_landing_order_and_may_wait_on_the_map(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Defect 4: done-callbacks ran on the writer, tailer or IO thread, and
    listeners on the tailer thread; one that waited on the same map (another
    put's result, a latest read) waited on itself."""
    topic = unique_topic("callbacks")
    m = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    try:
        m.put("warm-up", 0).result(timeout=30)
        seen: list[tuple[str, str, Any]] = []
        outcomes: list[Future[Any]] = []

        def waits_on_the_map(kind: str) -> Callable[[Future[Any]], None]:
            outcome: Future[Any] = Future()
            outcomes.append(outcome)

            def callback(done: Future[Any]) -> None:
                try:
                    name = threading.current_thread().name
                    # another write and a latest read, from inside the callback
                    m.put(f"from-{kind}", 1).result(timeout=15)
                    value = m.get("k", latest=True).result(timeout=15)
                    seen.append((kind, name, done.result()))
                    outcome.set_result(value)
                except BaseException as exc:
                    outcome.set_exception(exc)

            return callback

        m.put("k", 1).add_done_callback(waits_on_the_map("put"))
        m.update("k", lambda v: (v or 0) + 1).add_done_callback(waits_on_the_map("update"))
        m.get("k", latest=True).add_done_callback(waits_on_the_map("latest-read"))
        m.manager.write(lambda s: [], None).add_done_callback(waits_on_the_map("empty-write"))

        listened: Future[str] = Future()

        def listener(_change: Any) -> None:
            if listened.done():
                return
            try:
                m.get("k", latest=True).result(timeout=15)
                listened.set_result(threading.current_thread().name)
            except BaseException as exc:
                listened.set_exception(exc)

        m.manager.add_listener(listener)
        m.put("k2", 1).result(timeout=30)
        for outcome in outcomes:
            outcome.result(timeout=60)  # a deadlock times out here
        assert listened.result(timeout=60).startswith("pss-callbacks")
        for kind, name, _ in seen:
            assert name.startswith("pss-callbacks"), (kind, name)

        # landing order: the callbacks of puts made without waiting see the
        # positions in increasing order
        order: list[Any] = []
        done = threading.Event()
        n = 200
        for i in range(n):
            fut = m.put(f"o{i % 7}", i)
            fut.add_done_callback(lambda f: order.append(f.result()))
        m.put("last", 1).add_done_callback(lambda _f: done.set())
        assert done.wait(60)
        assert len(order) == n
        assert order == sorted(order)
    finally:
        m.close()


def test_an_op_the_topic_cannot_carry_fails_its_own_write_only(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Defect 8: a keyless op that serializes to empty bytes failed every write
    of its group commit. It fails its own write, with a ValueError."""
    topic = unique_topic("emptyop")
    manager = (
        SharedStateManager.builder(make_client(), topic, admin_url=admin_url)
        .with_op_serializer(lambda op: b"" if op == "empty" else op.encode())
        .with_op_deserializer(lambda data: data.decode())
        .with_database_initializer(list)
        .with_change_log_applier(lambda state, op: state.append(op))
        .build()
    )
    try:
        manager.write(lambda _s: ["first"]).result(timeout=30)
        writes = []
        for i in range(20):
            writes.append(manager.write(lambda _s, i=i: [f"w{i}"], blind=True))
            if i == 10:
                bad = manager.write(lambda _s: ["empty"], blind=True)
        with pytest.raises(ValueError, match="empty"):
            bad.result(timeout=30)
        for write in writes:
            write.result(timeout=30)
        state = manager.read(list, latest=True).result(timeout=30)
        assert sorted(state) == sorted(["first", *[f"w{i}" for i in range(20)]])
    finally:
        manager.close()


def test_a_put_racing_close_is_completed_either_way(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Defect 11: a put racing ``close()`` could be queued after the writer's
    final drain and never completed. Each put made while the map closes lands
    or fails with StateClosedError."""
    for round_ in range(5):
        m = PulsarMap[str, int](
            make_client(), unique_topic(f"closerace{round_}"), admin_url=admin_url
        )
        m.put("warm-up", 0).result(timeout=30)
        made: list[Future[Any]] = []
        go = threading.Event()

        def put_until_closed(
            m: PulsarMap[str, int] = m,
            made: list[Future[Any]] = made,
            go: threading.Event = go,
        ) -> None:
            go.wait()
            for i in range(2000):
                try:
                    made.append(m.put(f"k{i % 10}", i))
                except StateClosedError:
                    return

        threads = [threading.Thread(target=put_until_closed) for _ in range(3)]
        for t in threads:
            t.start()
        go.set()
        time.sleep(0.05)
        m.close()
        for t in threads:
            t.join(timeout=60)
        for fut in made:
            with contextlib.suppress(StateClosedError):
                fut.result(timeout=30)  # never left pending


def test_a_checkpoint_covers_writes_acknowledged_to_other_processes(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Defect 7: ``checkpoint()`` took the state as applied locally, so a write
    acknowledged to another process's map a moment before could be missing
    (the manifest covered 37:2, the other process's write was at 37:3). The
    checkpoint promises every write acknowledged before the call."""
    topic = unique_topic("ckptcatchup")
    a = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    b = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    try:
        for i in range(20):
            landed = b.put(f"k{i}", i).result(timeout=30)
            manifest = a.checkpoint().result(timeout=60)
            assert manifest.position.covers(landed), (i, manifest.position, landed)
    finally:
        a.close()
        b.close()


def _delete_topic(admin_url: str, topic: str) -> None:
    path = topic.replace("persistent://", "persistent/")
    resp = requests.delete(f"{admin_url}/admin/v2/{path}", params={"force": "true"}, timeout=30)
    assert resp.status_code in (200, 204), resp.text


def test_a_topic_made_again_does_not_bootstrap_from_the_deleted_ones_snapshot(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Defect 6: delete a state topic, make it again under the same name, and a
    new manager bootstrapped from the deleted topic's snapshot (20, not 0).
    Snapshots are bound to the topic's incarnation."""
    topic = unique_topic("reborn")

    def open_manager() -> SharedStateManager[dict[str, int], int]:
        return (
            SharedStateManager.builder(make_client(), topic, admin_url=admin_url)
            .with_op_serializer(lambda op: str(op).encode())
            .with_op_deserializer(int)
            .with_database_initializer(lambda: {"n": 0})
            .with_change_log_applier(lambda state, op: state.__setitem__("n", state["n"] + op))
            .with_snapshots(
                lambda state: str(state["n"]).encode(),
                lambda data: {"n": int(data)},
                every_writes=5,
            )
            .build()
        )

    first = open_manager()
    try:
        for _ in range(20):
            first.write(lambda _s: [1]).result(timeout=30)
    finally:
        first.close()
    again = open_manager()
    try:
        assert again.bootstrap_source == "snapshot"  # the same topic: its snapshot is used
        assert again.read(lambda s: s["n"]).result() == 20
    finally:
        again.close()
    _delete_topic(admin_url, again.topic)
    reborn = open_manager()
    try:
        assert reborn.bootstrap_source == "topic"
        assert reborn.read(lambda s: s["n"], latest=True).result(timeout=30) == 0
    finally:
        reborn.close()


def test_a_map_made_again_does_not_load_the_deleted_ones_checkpoint(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Defect 6, for a map's checkpoints."""
    topic = unique_topic("reborn-map")
    m = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    try:
        m.put_all({f"k{i}": i for i in range(20)}).result(timeout=30)
        m.checkpoint().result(timeout=60)
    finally:
        m.close()
    again = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    try:
        assert again.manager.bootstrap_source == "checkpoint"
        assert again.size().result() == 20
    finally:
        again.close()
    _delete_topic(admin_url, again.topic)
    reborn = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    try:
        assert reborn.manager.bootstrap_source == "topic"
        assert reborn.items(latest=True).result(timeout=30) == {}
    finally:
        reborn.close()


def test_a_stale_write_is_repaired_before_anyone_writes_again(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Defect 5: ``k = 1`` is written; a fenced writer's late ``k = 2`` lands
    after a newer epoch marker (every reader skips it); nobody writes; the
    topic is compacted, which keeps the stale message as k's last. The repair
    (re-asserting k = 1) waited for the holder's next write, so a map opened
    after compaction saw k absent. It is made as soon as the stale write is
    seen, by a map whose writer is idle."""
    topic = unique_topic("stale-repair")
    client = make_client()
    m = PulsarMap[str, int](client, topic, admin_url=admin_url)
    try:
        m.put("k", 1).result(timeout=30)
        writer = m.manager._writer
        wait_until(  # the writer let the topic go (idle): another producer may append
            lambda: writer.tenure.state is TenureState.IDLE, message="the writer let go"
        )
        late = client.create_producer(m.topic)
        try:  # a fenced writer's late write: epoch 1, older than every marker since
            stale = write_message("late-writer-1", "k", b"2", 1)
            late.send(stale.payload, properties=stale.properties, partition_key=stale.key)
        finally:
            late.close()
        wait_until(lambda: not m.manager._tailer.stale_keys, timeout_s=60, message="k repaired")
        assert m.get("k").result() == 1
    finally:
        m.close()
    compact_topic(admin_url, topic)
    fresh = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    try:
        assert fresh.get("k", latest=True).result(timeout=30) == 1
    finally:
        fresh.close()


def test_a_stale_write_compacted_before_any_repair_does_not_lose_the_key(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Defect 5, the rest of it: no map is open when a fenced writer's late
    ``k = 2`` lands, so nobody repairs it before the topic is compacted.
    Compaction keeps the stale message as k's last and drops ``k = 1``: the
    compacted view shows k absent. A map opened then saw k absent, and its
    repair published a delete, so k was lost for everyone. A bootstrap that
    meets an unrepaired stale key in the compacted view reads the raw history
    instead, where ``k = 1`` is; its repair then re-asserts 1."""
    topic = unique_topic("stale-compacted")
    client = make_client()
    with PulsarMap[str, int](client, topic, admin_url=admin_url) as m:
        m.put("k", 1).result(timeout=30)
        m.put("other", 7).result(timeout=30)
        full = m.topic
    late = client.create_producer(full)
    try:  # a fenced writer's late write: epoch 1, older than every marker since
        stale = write_message("late-writer-1", "k", b"2", 1)
        late.send(stale.payload, properties=stale.properties, partition_key=stale.key)
    finally:
        late.close()
    compact_topic(admin_url, topic)
    fresh = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    try:
        assert fresh.items(latest=True).result(timeout=30) == {"k": 1, "other": 7}
        # its writer repairs k (re-asserts 1) as soon as it sees the stale key
        wait_until(lambda: not fresh.manager._tailer.stale_keys, timeout_s=60, message="k repaired")
        assert fresh.get("k").result() == 1
    finally:
        fresh.close()
    # after the repair and another compaction, the compacted view is right again
    compact_topic(admin_url, topic)
    again = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    try:
        assert again.items(latest=True).result(timeout=30) == {"k": 1, "other": 7}
        assert not again.manager._tailer.stale_keys
    finally:
        again.close()
