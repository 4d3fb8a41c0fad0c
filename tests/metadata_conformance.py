"""One conformance suite for every metadata store (PIP-45 semantics).

Modules that import these tests provide a ``stores`` fixture: a callable that
opens another session (store) on the same tree, so that locks and ephemeral
nodes can be tested between owners, a ``base`` fixture: a unique path
prefix, and a ``session_faults`` fixture (:class:`SessionFaults`): how to lose
a store's session (really: on the Pulsar store its session consumer goes away
and the other stores expire it through the broker) and bring it back.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Future
from typing import Protocol

import pytest
from harness import wait_until

from pulsar_state import (
    AsyncCoordinationService,
    AsyncMetadataStore,
    BadVersionError,
    BaseMetadataStore,
    CoordinationService,
    MetadataCache,
    NotFoundError,
    Notification,
    NotificationType,
    OperationTimeoutError,
    ResourceBusyError,
)
from pulsar_state.config import StateConfig
from pulsar_state.coordination import LockEvent
from pulsar_state.core.log.format import MESSAGE_OVERHEAD_BYTES
from pulsar_state.errors import TooManyOpsError, ValueTooLargeError
from pulsar_state.metadata.tree import SessionEvent


class StoreFactory(Protocol):
    def __call__(self, config: StateConfig | None = None) -> BaseMetadataStore:
        """Another store (session) on the same tree; ``config``: its write limits."""
        ...


class SessionFaults(Protocol):
    def lose(self, store: BaseMetadataStore) -> None:
        """Lose ``store``'s session; return once it has heard ``SESSION_LOST``."""

    def restore(self, store: BaseMetadataStore) -> None:
        """Bring the session back (the store then hears it)."""


T = 30  # seconds per blocking call


def test_put_get_versions_and_stat(stores: StoreFactory, base: str) -> None:
    s = stores()
    assert s.get(f"{base}/a").result(T) is None
    stat = s.put(f"{base}/a", b"1").result(T)
    assert (stat.path, stat.version, stat.ephemeral) == (f"{base}/a", 0, False)
    assert stat.creation_timestamp == stat.modification_timestamp > 0
    got = s.get(f"{base}/a").result(T)
    assert got is not None and got.value == b"1" and got.stat.version == 0
    stat2 = s.put(f"{base}/a", b"2").result(T)
    assert stat2.version == 1 and stat2.creation_timestamp == stat.creation_timestamp
    assert s.exists(f"{base}/a").result(T) and not s.exists(f"{base}/zz").result(T)


def test_compare_and_set(stores: StoreFactory, base: str) -> None:
    s = stores()
    p = f"{base}/cas"
    s.put(p, b"x", -1).result(T)
    with pytest.raises(BadVersionError) as info:
        s.put(p, b"y", -1).result(T)
    assert (info.value.expected_version, info.value.actual_version) == (-1, 0)
    with pytest.raises(BadVersionError):
        s.put(p, b"y", 5).result(T)
    assert s.put(p, b"y", 0).result(T).version == 1
    with pytest.raises(BadVersionError):
        s.delete(p, 0).result(T)
    s.delete(p, 1).result(T)
    with pytest.raises(NotFoundError):
        s.delete(p).result(T)
    with pytest.raises(BadVersionError):
        s.put(p, b"z", 3).result(T)  # absent is version -1


def test_children_are_direct_and_sorted(stores: StoreFactory, base: str) -> None:
    s = stores()
    for p in ("/c", "/a", "/b/x", "/b/y/z"):
        s.put(f"{base}{p}", b"").result(T)
    assert s.get_children(base).result(T) == ["a", "b", "c"]
    assert s.get_children(f"{base}/b").result(T) == ["x", "y"]
    assert s.get_children(f"{base}/nothing").result(T) == []
    s.delete(f"{base}/b/y/z").result(T)
    assert s.get_children(f"{base}/b").result(T) == ["x"]


@pytest.mark.parametrize(
    "path",
    [
        "",
        "a",
        "/a/",
        "//a",
        "/a/./b",
        "/a/../b",
        "/a\x00b",
        "/a\ud800",  # no UTF-8 for a lone surrogate: no Pulsar message key
        "/__pss__/x",
        "/" + "a" * 1100,
    ],
)
def test_bad_paths_are_clear_errors(stores: StoreFactory, path: str) -> None:
    s = stores()
    with pytest.raises(ValueError):
        s.put(path, b"x")
    with pytest.raises(ValueError):
        s.get(path)


def test_bad_values_and_versions(stores: StoreFactory, base: str) -> None:
    s = stores()
    with pytest.raises(TypeError):
        s.put(f"{base}/v", "text")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        s.put(f"{base}/v", b"x", -2)
    with pytest.raises(ValueError):
        s.put("/", b"x")


def _failing_listener(note: Notification) -> None:
    raise RuntimeError(f"listener bug on {note}")


def test_listeners_see_every_change_in_order(stores: StoreFactory, base: str) -> None:
    s, other = stores(), stores()
    seen: list[Notification] = []
    s.register_listener(lambda n: seen.append(n) if n.path.startswith(base) else None)
    s.register_listener(_failing_listener)  # a failing listener harms no one
    other.put(f"{base}/n", b"1").result(T)
    other.put(f"{base}/n", b"2").result(T)
    other.delete(f"{base}/n").result(T)
    expected = [
        Notification(NotificationType.CREATED, f"{base}/n"),
        Notification(NotificationType.CHILDREN_CHANGED, base),
        Notification(NotificationType.MODIFIED, f"{base}/n"),
        Notification(NotificationType.DELETED, f"{base}/n"),
        Notification(NotificationType.CHILDREN_CHANGED, base),
    ]
    wait_until(lambda: seen == expected, timeout_s=T, message=f"notifications {seen}")


def test_ephemeral_nodes_go_with_their_session(stores: StoreFactory, base: str) -> None:
    owner, other = stores(), stores()
    stat = owner.put(f"{base}/eph", b"x", ephemeral=True).result(T)
    assert stat.ephemeral
    assert other.get(f"{base}/eph").result(T) is not None or wait_until(
        lambda: other.get(f"{base}/eph").result(T) is not None, timeout_s=T
    )
    owner.close()
    wait_until(
        lambda: other.get(f"{base}/eph").result(T) is None,
        timeout_s=T,
        message="ephemeral node removed with its session",
    )


def test_cache_read_modify_update(stores: StoreFactory, base: str) -> None:
    s = stores()
    cache: MetadataCache[dict[str, int]] = MetadataCache(s)
    p = f"{base}/cfg"
    with pytest.raises(NotFoundError):
        cache.read_modify_update(p, lambda v: v).result(T)
    assert cache.read_modify_update_or_create(p, lambda v: {"n": 1}).result(T) == {"n": 1}
    assert cache.get(p).result(T) == {"n": 1}
    assert cache.read_modify_update(p, lambda v: {"n": v["n"] + 1}).result(T) == {"n": 2}
    s.put(p, b'{"n": 10}').result(T)  # a change behind the cache's back...
    wait_until(lambda: cache.get(p).result(T) == {"n": 10}, timeout_s=T)  # ...is seen
    cache.close()


def test_concurrent_counters_are_unique(stores: StoreFactory, base: str) -> None:
    services = [CoordinationService[str](stores()) for _ in range(3)]
    values: list[int] = []
    lock = threading.Lock()

    def take(svc: CoordinationService[str]) -> None:
        for _ in range(10):
            v = svc.get_next_counter_value(f"{base}/ctr").result(60)
            with lock:
                values.append(v)

    threads = [threading.Thread(target=take, args=(svc,)) for svc in services]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(values) == list(range(1, 31))
    for svc in services:
        svc.close()


def test_locks(stores: StoreFactory, base: str) -> None:
    a = CoordinationService[dict[str, str]](stores())
    b = CoordinationService[dict[str, str]](stores())
    p = f"{base}/locks/job-1"
    lock = a.acquire_lock(p, {"owner": "a"}).result(T)
    assert lock.held
    with pytest.raises(ResourceBusyError):
        b.acquire_lock(p, {"owner": "b"}).result(T)
    wait_until(lambda: b.read_lock(p).result(T) == {"owner": "a"}, timeout_s=T)
    assert b.list_locks(f"{base}/locks").result(T) == ["job-1"]
    lock.release().result(T)
    assert lock.released and not lock.held
    assert not lock.lost.done()  # released, not lost
    second = b.acquire_lock(p, {"owner": "b"}).result(T)
    assert second.fencing_token > lock.fencing_token
    second.release().result(T)
    a.close()
    b.close()


def test_a_blocking_lock_waits_its_turn_within_its_timeout(stores: StoreFactory, base: str) -> None:
    """``lock()`` waits while another holds the lock (another service, or another
    thread of the same service: never handed out twice), gives up at its timeout
    leaving nothing held, and a ``with`` block releases it."""
    a = CoordinationService[str](stores())
    b = CoordinationService[str](stores())
    p = f"{base}/locks/blocking"
    inside: list[str] = []
    most = [0]
    guard = threading.Lock()

    def critical(service: CoordinationService[str], who: str) -> None:
        with service.lock(p, who, timeout_s=4 * T) as lock:
            assert lock.held
            with guard:
                inside.append(who)
                most[0] = max(most[0], len(inside))
            time.sleep(0.2)
            with guard:
                inside.remove(who)

    try:
        with a.lock(p, "a") as first:
            with pytest.raises(OperationTimeoutError):
                b.lock(p, "b", timeout_s=0.5)
            assert b.read_lock(p).result(T) == "a"  # the timed-out wait took nothing
            waiters = [
                threading.Thread(target=critical, args=(s, w))
                for s, w in ((a, "a2"), (a, "a3"), (b, "b"))
            ]
            for t in waiters:
                t.start()
            time.sleep(0.3)
            assert inside == []  # all wait while the first holds it
        assert first.released and not first.lost.done()  # the with block released it
        for t in waiters:
            t.join(6 * T)
            assert not t.is_alive()
        assert most[0] == 1  # one holder at a time, also between threads of a
        wait_until(lambda: a.read_lock(p).result(T) is None, timeout_s=T)
    finally:
        a.close()
        b.close()


async def _async_lock_times_out(service: AsyncCoordinationService[str], p: str) -> None:
    with pytest.raises(OperationTimeoutError):
        await service.lock(p, "late", timeout_s=0.3)


def test_the_asyncio_lock_times_out_leaving_nothing_held(stores: StoreFactory, base: str) -> None:
    a = CoordinationService[str](stores())
    b = CoordinationService[str](stores())
    p = f"{base}/locks/async"
    try:
        held = a.acquire_lock(p, "a").result(T)
        asyncio.run(_async_lock_times_out(AsyncCoordinationService(b), p))
        held.release().result(T)
        assert b.read_lock(p).result(T) is None
        got = asyncio.run(AsyncCoordinationService(b).lock(p, "b", timeout_s=T))
        assert got.held and got.content == "b"
        got.release().result(T)
    finally:
        a.close()
        b.close()


def test_leader_election_hands_over(stores: StoreFactory, base: str) -> None:
    first_store = stores()
    first = CoordinationService[str](first_store)
    second = CoordinationService[str](stores())
    p = f"{base}/leader"
    leader = first.become_leader(p, "first").result(T)
    pending = second.become_leader(p, "second")
    assert not pending.done()
    leader.release().result(T)
    took_over = pending.result(T)
    assert took_over.content == "second" and took_over.fencing_token > leader.fencing_token
    assert second.read_lock(p).result(T) == "second"
    first.close()
    second.close()


def test_lock_is_lost_when_its_session_dies(stores: StoreFactory, base: str) -> None:
    holder_store, watcher_store = stores(), stores()
    holder = CoordinationService[str](holder_store)
    watcher = CoordinationService[str](watcher_store)
    p = f"{base}/lease"
    lock = holder.acquire_lock(p, "holder").result(T)
    took_over = watcher.become_leader(p, "watcher")
    holder_store.close()  # the session ends
    assert took_over.result(60).content == "watcher"
    wait_until(lock.lost.done, timeout_s=T, message="lost future completed")
    watcher.close()


def test_asyncio_surface(stores: StoreFactory, base: str) -> None:
    store = AsyncMetadataStore(stores())
    coord = AsyncCoordinationService[str](CoordinationService(store.sync))

    async def main() -> None:
        stat = await store.put(f"{base}/aio", b"1", -1)
        assert stat.version == 0
        got = await store.get(f"{base}/aio")
        assert got is not None and got.value == b"1"
        with pytest.raises(BadVersionError):
            await store.put(f"{base}/aio", b"2", 5)
        assert await store.get_children(base) == ["aio"]
        lock = await coord.acquire_lock(f"{base}/aio-lock", "me")
        assert await coord.read_lock(f"{base}/aio-lock") == "me"
        await coord.release(lock)
        assert await coord.get_next_counter_value(f"{base}/aio-ctr") == 1
        await store.delete(f"{base}/aio")
        assert not await store.exists(f"{base}/aio")

    asyncio.run(main())
    coord.sync.close()


def _drain(store: BaseMetadataStore, writer: BaseMetadataStore, base: str) -> None:
    """Wait until ``store`` has applied, and its listeners have seen, everything
    ``writer`` wrote so far: a marker written after it comes after it in the log,
    and a listener registered last sees it after every earlier listener saw the rest."""
    marker = f"{base}/drain-{threading.get_ident()}-{id(store)}"
    seen = threading.Event()

    def listener(note: Notification) -> None:
        if note.path == marker:
            seen.set()

    store.register_listener(listener)
    try:
        writer.put(marker, b"").result(T)
        assert seen.wait(T), f"{store.session_id} saw the marker within {T}s"
    finally:
        store.unregister_listener(listener)


def test_a_stale_release_leaves_the_new_holders_lock(stores: StoreFactory, base: str) -> None:
    a = CoordinationService[str](stores())
    b_store, operator = stores(), stores()
    b = CoordinationService[str](b_store)
    p = f"{base}/locks/x"
    stale = a.acquire_lock(p, "a").result(T)
    operator.delete(p).result(T)  # an operator, or the expiry of a's session
    current = b.acquire_lock(p, "b").result(T)  # at version 0, like a's node was
    stale.release().result(T)  # must not delete b's lock
    assert stale.lost.done() and not stale.held
    _drain(b_store, operator, base)
    node = b_store.get(p).result(T)
    assert node is not None, "a stale holder's release deleted the new holder's lock"
    assert node.stat.owner == b_store.session_id
    assert b_store.fencing_token(p) == current.fencing_token
    assert current.held and b.read_lock(p).result(T) == "b"
    current.release().result(T)
    assert b_store.get(p).result(T) is None or wait_until(
        lambda: b_store.get(p).result(T) is None, timeout_s=T
    )
    a.close()
    b.close()


def test_a_released_lock_is_not_lost(stores: StoreFactory, base: str) -> None:
    """PIP-45's lock-expired future, named ``lost`` here, completes when the lock
    is lost, never on the holder's own release: not when the release's delete
    lands, not when its notification comes back, not on a second release."""
    a_store, b_store = stores(), stores()
    a = CoordinationService[str](a_store)
    b = CoordinationService[str](b_store)
    p = f"{base}/locks/released"
    lock = a.acquire_lock(p, "a").result(T)
    events: list[LockEvent] = []
    lock.add_listener(events.append)
    assert not lock.released
    lock.release().result(T)
    assert lock.released and not lock.held and not lock.active
    _drain(a_store, b_store, base)  # a has heard its own delete
    assert not lock.lost.done() and events == []
    assert lock.release().result(T) is None  # again: nothing to do, still not lost
    assert not lock.lost.done()
    with a.lock(p, "a2", timeout_s=T) as second:
        assert second.held
    assert second.released and not second.lost.done()
    leader = b.become_leader(p, "b").result(T)
    leader.release().result(T)
    _drain(a_store, b_store, base)
    assert not lock.lost.done() and not second.lost.done() and not leader.lost.done()
    assert events == []
    a.close()
    b.close()


def test_a_release_that_finds_the_lock_taken_reports_the_loss(
    stores: StoreFactory, base: str
) -> None:
    """A holder whose node was deleted behind its back, or taken, learns it at
    the latest when it releases: ``lost`` completes (its release does nothing)."""
    a_store, b_store, operator = stores(), stores(), stores()
    gate = threading.Event()
    a_store.register_listener(lambda _note: gate.wait(T))  # a hears nothing meanwhile
    a = CoordinationService[str](a_store)
    b = CoordinationService[str](b_store)
    p = f"{base}/locks/taken-before-release"
    stale = a.acquire_lock(p, "a").result(T)
    operator.delete(p).result(T)
    current = b.acquire_lock(p, "b").result(T)
    assert stale.release().result(T) is None  # finds b's node: deletes nothing
    assert stale.lost.done() and not stale.held
    gate.set()
    assert current.owns(b_store.get(p, latest=True).result(T))
    current.release().result(T)
    assert not current.lost.done()
    a.close()
    b.close()


def test_leader_loses_when_its_node_is_deleted_and_recreated(
    stores: StoreFactory, base: str
) -> None:
    a_store, b_store, operator = stores(), stores(), stores()
    gate = threading.Event()
    # hold a's notifications back (registered first, this listener runs first)
    a_store.register_listener(lambda _note: gate.wait(T))
    a = CoordinationService[str](a_store)
    b = CoordinationService[str](b_store)
    p = f"{base}/leader"
    old = a.become_leader(p, "a").result(T)
    operator.delete(p).result(T)
    new = b.become_leader(p, "b").result(T)  # re-created, at version 0 again
    gate.set()  # a now learns of the delete, after the re-create
    _drain(a_store, operator, base)
    assert old.lost.done(), "a kept leading after its node was deleted and re-created"
    assert new.held and new.fencing_token > old.fencing_token
    a.close()
    b.close()


# -- PIP-45 gaps: sequential nodes, recursive delete, prefix listeners, cached
# -- children and existence, session loss and lock revalidation -----------------


def test_sequential_nodes(stores: StoreFactory, base: str) -> None:
    s, other = stores(), stores()
    made = [s.put(f"{base}/q/item-", f"{i}".encode(), sequential=True).result(T) for i in range(3)]
    assert [m.path for m in made] == [f"{base}/q/item-{n:010d}" for n in (1, 2, 3)]
    assert [m.version for m in made] == [0, 0, 0]
    got = s.get(made[1].path).result(T)
    assert got is not None and got.value == b"1"
    # the counter is per parent, shared by every prefix under it and every session
    other_made = other.put(f"{base}/q/job-", b"", -1, sequential=True).result(T)
    assert other_made.path == f"{base}/q/job-{4:010d}"
    assert s.put(f"{base}/r/x", b"", sequential=True).result(T).path == f"{base}/r/x{1:010d}"
    # it never goes back: not when the nodes, nor their parent, are deleted
    s.delete_recursive(f"{base}/q").result(T)
    again = other.put(f"{base}/q/item-", b"", sequential=True).result(T)
    assert again.path == f"{base}/q/item-{5:010d}"
    eph = s.put(f"{base}/q/e-", b"", ephemeral=True, sequential=True).result(T)
    assert eph.ephemeral and eph.owner == s.session_id and eph.path.endswith(f"{6:010d}")
    _drain(s, other, base)
    assert s.get_children(f"{base}/q").result(T) == sorted(
        p.rsplit("/", 1)[1] for p in (again.path, eph.path)
    )


def test_concurrent_sequential_puts_get_distinct_numbers(stores: StoreFactory, base: str) -> None:
    writers = [stores() for _ in range(3)]
    futures = [w.put(f"{base}/seq/n-", b"", sequential=True) for _ in range(8) for w in writers]
    paths = [f.result(60).path for f in futures]
    assert sorted(paths) == [f"{base}/seq/n-{n:010d}" for n in range(1, 25)]


@pytest.mark.parametrize(
    ("prefix", "version"),
    [("/q/", None), ("/", None), ("q-", None), ("/q/a//b", None), ("/q/item-", 0)],
)
def test_bad_sequential_puts_are_clear_errors(
    stores: StoreFactory, prefix: str, version: int | None
) -> None:
    s = stores()
    with pytest.raises(ValueError):
        s.put(prefix, b"x", version, sequential=True)


def test_delete_recursive(stores: StoreFactory, base: str) -> None:
    s, other = stores(), stores()
    for p in ("/t", "/t/a", "/t/a/b/c", "/t/d", "/tt", "/u"):
        s.put(f"{base}{p}", b"").result(T)
    seen: list[Notification] = []
    other.register_listener(seen.append, prefix=f"{base}/t")
    deleted = s.delete_recursive(f"{base}/t").result(T)
    assert deleted == [f"{base}{p}" for p in ("/t/a/b/c", "/t/a", "/t/d", "/t")]  # deepest first
    assert s.get_children(base).result(T) == ["tt", "u"]  # /tt is not below /t
    assert s.get_children(f"{base}/t").result(T) == []
    assert not s.exists(f"{base}/t/a/b/c").result(T)
    deletions = [n.path for n in seen if n.type is NotificationType.DELETED]
    wait_until(
        lambda: [n.path for n in seen if n.type is NotificationType.DELETED] == deleted,
        timeout_s=T,
        message=f"a deletion notified per node: {deletions}",
    )
    assert s.delete_recursive(f"{base}/t").result(T) == []  # nothing there: not an error
    assert s.delete_recursive(f"{base}/nothing/here").result(T) == []


@pytest.mark.parametrize("path", ["/", "", "x", "/a/", "/a//b", "/__pss__/seq"])
def test_delete_recursive_bad_input(stores: StoreFactory, path: str) -> None:
    s = stores()
    with pytest.raises(ValueError):
        s.delete_recursive(path)


def _tombstone_bytes(paths: list[str]) -> int:
    """What deleting ``paths`` costs of one write, as the core counts it."""
    return sum(len(p) + MESSAGE_OVERHEAD_BYTES for p in paths)


def test_delete_recursive_over_max_write_bytes_is_refused_and_deletes_nothing(
    stores: StoreFactory, base: str
) -> None:
    """A recursive delete is one atomic write: one that one write cannot hold is
    a clear error before anything is written, on every store alike."""
    s = stores(StateConfig(max_write_bytes=2048))
    root = f"{base}/big"
    paths: list[str] = []
    while _tombstone_bytes(paths) <= 2048:
        paths.append(f"{root}/n{len(paths):02d}")
    for p in paths:
        s.put(p, b"x").result(T)
    _drain(s, s, base)  # the creations heard: what is heard from now on is news
    heard: list[Notification] = []
    s.register_listener(heard.append, prefix=root)
    with pytest.raises(ValueTooLargeError) as refused:
        s.delete_recursive(root).result(T)
    assert not isinstance(refused.value, TooManyOpsError)
    message = str(refused.value)
    assert f"delete_recursive('{root}') of {len(paths)} nodes" in message, message
    assert "max_write_bytes=2048" in message and "nothing was deleted" in message, message
    assert (refused.value.size, refused.value.limit) == (_tombstone_bytes(paths), 2048)
    assert s.get_children(root, latest=True).result(T) == [p.rsplit("/", 1)[1] for p in paths]
    s.delete(paths[-1]).result(T)
    wait_until(lambda: len(heard) >= 1, timeout_s=T, message="the single delete heard")
    assert heard[0] == Notification(NotificationType.DELETED, paths[-1]), heard
    assert s.delete_recursive(root).result(T) == paths[:-1]  # one less fits
    assert s.get_children(root, latest=True).result(T) == []


def test_a_write_over_max_write_bytes_is_refused_on_every_store(
    stores: StoreFactory, base: str
) -> None:
    s = stores(StateConfig(max_write_bytes=2048))
    with pytest.raises(ValueTooLargeError):
        s.put(f"{base}/huge", b"x" * 2048).result(T)
    assert not s.exists(f"{base}/huge", latest=True).result(T)
    s.put(f"{base}/small", b"x" * 100).result(T)


def test_delete_recursive_over_max_ops_per_write_is_refused_and_deletes_nothing(
    stores: StoreFactory, base: str
) -> None:
    s = stores(StateConfig(max_ops_per_write=5))
    root = f"{base}/many"
    for i in range(6):
        s.put(f"{root}/n{i}", b"").result(T)
    with pytest.raises(TooManyOpsError) as refused:
        s.delete_recursive(root).result(T)
    message = str(refused.value)
    assert f"delete_recursive('{root}') of 6 nodes" in message, message
    assert "max_ops_per_write=5" in message and "nothing was deleted" in message, message
    assert (refused.value.count, refused.value.limit) == (6, 5)
    assert len(s.get_children(root, latest=True).result(T)) == 6
    s.delete(f"{root}/n0").result(T)
    assert len(s.delete_recursive(root).result(T)) == 5


def test_listeners_per_prefix(stores: StoreFactory, base: str) -> None:
    s, other = stores(), stores()
    under_a: list[Notification] = []
    everything: list[Notification] = []
    s.register_listener(under_a.append, prefix=f"{base}/a")
    s.register_listener(lambda n: everything.append(n) if n.path.startswith(base) else None)
    for p in ("/a", "/a/x", "/ab", "/b", "/a/x/y"):
        other.put(f"{base}{p}", b"").result(T)
    _drain(s, other, base)
    assert [(n.type, n.path) for n in under_a] == [
        (NotificationType.CREATED, f"{base}/a"),
        (NotificationType.CREATED, f"{base}/a/x"),
        (NotificationType.CHILDREN_CHANGED, f"{base}/a"),
        (NotificationType.CREATED, f"{base}/a/x/y"),
        (NotificationType.CHILDREN_CHANGED, f"{base}/a/x"),
    ]  # not /ab (a prefix of whole segments), not /b, not the base's changes
    assert len(everything) > len(under_a)
    s.unregister_listener(under_a.append)
    with pytest.raises(ValueError):
        s.register_listener(under_a.append, prefix="a/")
    with pytest.raises(TypeError):
        s.register_listener("not callable")  # type: ignore[arg-type]


def test_a_deep_create_notifies_every_ancestor_whose_children_changed(
    stores: StoreFactory, base: str
) -> None:
    s, other = stores(), stores()
    seen: list[Notification] = []
    s.register_listener(seen.append, prefix=base)
    other.put(f"{base}/x", b"").result(T)
    other.put(f"{base}/d/e/f", b"").result(T)  # /d and /d/e do not exist as nodes
    other.put(f"{base}/d/e/g", b"").result(T)  # only /d/e's children change
    other.delete(f"{base}/d/e/f").result(T)
    other.delete(f"{base}/d/e/g").result(T)  # /d/e, /d and base lose a child each
    _drain(s, other, base)
    changed = [n.path for n in seen if n.type is NotificationType.CHILDREN_CHANGED]
    b, d, e = base, f"{base}/d", f"{base}/d/e"
    assert changed[:7] == [b, e, d, b, e, e, e] and changed[7:9] == [d, b], changed


def test_cache_children_and_exists(stores: StoreFactory, base: str) -> None:
    s, other = stores(), stores()
    reads = {"children": 0, "exists": 0}
    real_children, real_exists = s.get_children, s.exists

    def counting_children(path: str) -> Future[list[str]]:
        reads["children"] += 1
        return real_children(path)

    def counting_exists(path: str) -> Future[bool]:
        reads["exists"] += 1
        return real_exists(path)

    s.get_children = counting_children  # type: ignore[method-assign]
    s.exists = counting_exists  # type: ignore[method-assign]
    cache: MetadataCache[dict[str, int]] = MetadataCache(s)
    root = f"{base}/k"  # not base: _drain's markers are children of base
    try:
        other.put(f"{root}/c/one", b"{}").result(T)
        _drain(s, other, base)
        assert cache.get_children(f"{root}/c").result(T) == ["one"]
        assert cache.get_children(f"{root}/c").result(T) == ["one"]
        assert not cache.exists(f"{root}/c/two").result(T)
        assert not cache.exists(f"{root}/c/two").result(T)
        assert reads == {"children": 1, "exists": 1}, "the second reads came from the cache"
        assert cache.get(f"{root}/c/one").result(T) == {}
        assert cache.exists(f"{root}/c/one").result(T)  # from the cached value
        assert reads["exists"] == 1
        other.put(f"{root}/c/two", b"{}").result(T)  # behind the cache's back
        wait_until(lambda: cache.exists(f"{root}/c/two").result(T), timeout_s=T)
        wait_until(lambda: cache.get_children(f"{root}/c").result(T) == ["one", "two"], timeout_s=T)
        assert cache.get_children(root).result(T) == ["c"]
        other.put(f"{root}/deep/er/node", b"{}").result(T)  # adds "deep" to root's children
        wait_until(lambda: cache.get_children(root).result(T) == ["c", "deep"], timeout_s=T)
        other.delete_recursive(f"{root}/c").result(T)
        wait_until(lambda: not cache.exists(f"{root}/c/one").result(T), timeout_s=T)
        wait_until(lambda: cache.get_children(root).result(T) == ["deep"], timeout_s=T)
        with pytest.raises(ValueError):
            cache.get_children("bad")
        with pytest.raises(ValueError):
            cache.exists("/bad/")
    finally:
        cache.close()


def test_session_events_reach_session_listeners(
    stores: StoreFactory, session_faults: SessionFaults, base: str
) -> None:
    s, _other = stores(), stores()
    events: list[SessionEvent] = []
    s.register_session_listener(events.append)
    assert s.session_healthy
    session_faults.lose(s)
    assert not s.session_healthy
    session_faults.restore(s)
    wait_until(
        lambda: SessionEvent.SESSION_REESTABLISHED in events,
        timeout_s=T,
        message=f"session events {events}",
    )
    assert s.session_healthy
    # a store may report the connection's loss first; then lost, then back
    assert [e for e in events if e is not SessionEvent.CONNECTION_LOST] == [
        SessionEvent.SESSION_LOST,
        SessionEvent.SESSION_REESTABLISHED,
    ]
    with pytest.raises(TypeError):
        s.register_session_listener(None)  # type: ignore[arg-type]


def test_a_lock_is_reasserted_when_its_session_comes_back(
    stores: StoreFactory, session_faults: SessionFaults, base: str
) -> None:
    holder_store, watcher_store = stores(), stores()
    holder = CoordinationService[str](holder_store)
    p = f"{base}/locks/revalidate"
    lock = holder.acquire_lock(p, "holder").result(T)
    first_token = lock.fencing_token
    events: list[LockEvent] = []
    lock.add_listener(events.append)
    session_faults.lose(holder_store)  # the holder's ephemeral node is deleted by the expiry
    wait_until(lambda: LockEvent.SESSION_LOST in events, timeout_s=T, message=f"events {events}")
    assert lock.suspended and not lock.held  # do not act on it...
    assert not lock.lost.done()  # ...but not lost yet: nobody else has it
    wait_until(
        lambda: watcher_store.get(p, latest=True).result(T) is None,
        timeout_s=T,
        message="the expired session's lock node deleted",
    )
    session_faults.restore(holder_store)
    wait_until(lambda: LockEvent.REASSERTED in events, timeout_s=T, message=f"events {events}")
    assert events == [LockEvent.SESSION_LOST, LockEvent.REASSERTED]
    assert lock.held and not lock.suspended and not lock.lost.done()
    assert lock.fencing_token > first_token  # made again: a new token
    node = watcher_store.get(p, latest=True).result(T)
    assert node is not None and node.stat.owner == holder_store.session_id
    assert node.stat.token == lock.fencing_token
    lock.release().result(T)
    assert watcher_store.get(p, latest=True).result(T) is None
    holder.close()


def test_a_lock_taken_while_its_session_was_lost_is_reported_lost(
    stores: StoreFactory, session_faults: SessionFaults, base: str
) -> None:
    holder_store, other_store = stores(), stores()
    holder = CoordinationService[str](holder_store)
    other = CoordinationService[str](other_store)
    p = f"{base}/locks/taken"
    lock = holder.acquire_lock(p, "holder").result(T)
    events: list[LockEvent] = []
    lock.add_listener(events.append)
    taken = other.become_leader(p, "other")
    session_faults.lose(holder_store)
    new = taken.result(60)  # elected once the expiry deleted the holder's node
    assert new.content == "other"
    session_faults.restore(holder_store)
    wait_until(lock.lost.done, timeout_s=T, message="the revalidation reports the loss")
    assert events == [LockEvent.SESSION_LOST, LockEvent.LOST] and not lock.held
    assert not lock.suspended
    node = other_store.get(p, latest=True).result(T)
    assert node is not None and new.owns(node), "the revalidation left the new holder's node"
    assert lock.release().result(T) is None  # a stale release: harmless
    assert new.owns(other_store.get(p, latest=True).result(T))
    holder.close()
    other.close()


def test_an_operator_delete_is_still_a_loss_while_the_session_is_healthy(
    stores: StoreFactory, base: str
) -> None:
    holder_store, operator = stores(), stores()
    holder = CoordinationService[str](holder_store)
    lock = holder.acquire_lock(f"{base}/locks/op", "holder").result(T)
    events: list[LockEvent] = []
    lock.add_listener(events.append)
    operator.delete(f"{base}/locks/op").result(T)
    wait_until(lock.lost.done, timeout_s=T, message="lost on an operator's delete")
    assert events == [LockEvent.LOST]
    holder.close()


def test_a_leader_campaigning_again_after_its_session_loss_is_elected(
    stores: StoreFactory, session_faults: SessionFaults, base: str
) -> None:
    """What a scheduler does: its leadership is suspended, it campaigns again at
    once; when the session is back it is elected (its lock re-asserted or its
    node taken over), never stuck behind its own node."""
    store, _other = stores(), stores()
    svc = CoordinationService[str](store)
    p = f"{base}/leader-again"
    leader = svc.become_leader(p, "me").result(T)
    session_faults.lose(store)
    wait_until(lambda: leader.suspended, timeout_s=T, message="leadership suspended")
    again = svc.become_leader(p, "me")
    session_faults.restore(store)
    elected = again.result(T)
    assert elected.held
    node = store.get(p, latest=True).result(T)
    assert node is not None and elected.owns(node)
    svc.close()
