"""One conformance suite for every metadata store (PIP-45 semantics).

Modules that import these tests provide a ``stores`` fixture: a callable that
opens another session (store) on the same tree, so that locks and ephemeral
nodes can be tested between owners, and a ``base`` fixture: a unique path
prefix.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

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
    ResourceBusyError,
)

StoreFactory = Callable[[], BaseMetadataStore]

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
    "path", ["", "a", "/a/", "//a", "/a/./b", "/a/../b", "/a\x00b", "/__pss__/x", "/" + "a" * 1100]
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
    assert lock.lost.done()
    second = b.acquire_lock(p, {"owner": "b"}).result(T)
    assert second.fencing_token > lock.fencing_token
    second.release().result(T)
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
