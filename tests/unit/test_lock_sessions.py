"""Lock ownership on the in-memory store with sessions lost and brought back:
locks are suspended, then re-asserted or lost to whoever took them meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future

import pytest
from harness import wait_until
from lock_model import Node, check_lock_ownership

from pulsar_state import BaseMetadataStore, CoordinationService, MemoryMetadataStore
from pulsar_state.coordination.lock import LockEvent
from pulsar_state.metadata.base import GetResult, SessionEvent


@pytest.fixture
def root() -> Iterator[MemoryMetadataStore]:
    store = MemoryMetadataStore()
    yield store
    store.close()


def _expire(store: BaseMetadataStore) -> None:
    assert isinstance(store, MemoryMetadataStore)
    store.expire_session()


def _restore(store: BaseMetadataStore) -> None:
    assert isinstance(store, MemoryMetadataStore)
    store.reestablish_session()


@pytest.mark.parametrize("seed", range(6))
def test_random_steps_with_sessions_lost_and_back(root: MemoryMetadataStore, seed: int) -> None:
    opened: list[MemoryMetadataStore] = []

    def new_store() -> BaseMetadataStore:
        store = root.sibling()
        opened.append(store)
        return store

    def node_of(path: str) -> Node | None:
        got = root.get(path).result(5)
        return None if got is None else (got.stat.owner, got.stat.token)

    try:
        counts = check_lock_ownership(
            new_store=new_store,
            operator=root,
            node_of=node_of,
            expire=_expire,
            paths=["/locks/a", "/locks/b"],
            steps=150,
            seed=seed,
            settle_s=5.0,
            lose=_expire,
            restore=_restore,
            bounce_weight=3,
        )
    finally:
        for store in opened:
            store.close()
    assert counts["bounce"] > 0, counts


def test_every_outcome_of_a_bounce_is_exercised(root: MemoryMetadataStore) -> None:
    totals: dict[str, int] = {}
    stores: list[MemoryMetadataStore] = []

    def new_store() -> BaseMetadataStore:
        store = root.sibling()
        stores.append(store)
        return store

    def node_of(path: str) -> Node | None:
        got = root.get(path).result(5)
        return None if got is None else (got.stat.owner, got.stat.token)

    try:
        for seed in range(10, 16):
            counts = check_lock_ownership(
                new_store=new_store,
                operator=root,
                node_of=node_of,
                expire=_expire,
                paths=[f"/locks-{seed}/a", f"/locks-{seed}/b"],  # one tree for all seeds
                steps=100,
                seed=seed,
                settle_s=5.0,
                lose=_expire,
                restore=_restore,
                bounce_weight=4,
            )
            for k, v in counts.items():
                totals[k] = totals.get(k, 0) + v
    finally:
        for store in stores:
            store.close()
    for kind in ("bounce", "reasserted", "lost_to_another", "taken_while_lost"):
        assert totals.get(kind, 0) > 0, f"never exercised {kind}: {totals}"


class _HeldReads(MemoryMetadataStore):
    """A store whose latest reads answer at once but are handed over only when
    the test lets each one through: a process paused between the broker's answer
    and its use, as a holder SIGSTOPped while its revalidation read was out."""

    def __init__(self) -> None:
        super().__init__()
        self.permits = threading.Semaphore(0)
        self.asked = 0

    def get(self, path: str, latest: bool = False) -> Future[GetResult | None]:
        answer = super().get(path, latest)
        if not latest:
            return answer
        self.asked += 1
        held: Future[GetResult | None] = Future()

        def hand_over() -> None:
            self.permits.acquire()
            held.set_result(answer.result())

        threading.Thread(target=hand_over, daemon=True).start()
        return held


def test_a_revalidation_does_not_clear_a_loss_counted_while_its_read_was_out() -> None:
    """Found by the paused-holder test under CPU load (test_lock_lease.py): the
    answer of a revalidation asked before a pause re-asserted the lock after the
    pause's loss, so ``held`` said True before the lock was checked again, while
    another session could hold it (here: does)."""
    store = _HeldReads()
    other = store.sibling()
    try:
        lock = CoordinationService[str](store).acquire_lock("/locks/a", "me").result(5)
        events: list[tuple[LockEvent, bool]] = []  # each event, and whether held then
        lock.add_listener(lambda event: events.append((event, lock.held)))
        # a lease lapse that nobody acted on: the node stays, the session comes back
        store._session_event(SessionEvent.SESSION_LOST)
        store.reestablish_session()
        wait_until(lambda: store.asked == 1, timeout_s=10, message="the revalidation read")
        # while that answer (the node is ours) is out: lost again, expired, taken
        store.expire_session()
        theirs = CoordinationService[str](other).acquire_lock("/locks/a", "them").result(5)
        store.reestablish_session()
        store.permits.release()  # the old answer arrives
        store.permits.release()  # (the next revalidation's fresh read, if one asks)
        lock.lost.result(10)  # it is theirs
        assert theirs.held and not lock.held
        # theirs since before the old answer arrived: never held here meanwhile
        wrong = [event for event, held in events if held]
        assert not wrong, f"held on a read made before the last loss: {events}"
    finally:
        store.permits.release(10)
        other.close()
        store.close()
