"""Lock ownership on the in-memory store with sessions lost and brought back:
locks are suspended, then re-asserted or lost to whoever took them meanwhile."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lock_model import Node, check_lock_ownership

from pulsar_state import BaseMetadataStore, MemoryMetadataStore


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
