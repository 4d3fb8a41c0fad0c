"""Lock ownership on the in-memory store: many random steps, several seeds."""

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


@pytest.mark.parametrize("seed", range(8))
def test_random_acquire_release_expire_delete(root: MemoryMetadataStore, seed: int) -> None:
    opened: list[MemoryMetadataStore] = []

    def new_store() -> BaseMetadataStore:
        store = root.sibling()
        opened.append(store)
        return store

    def node_of(path: str) -> Node | None:
        got = root.get(path).result(5)
        if got is None:
            return None
        return got.stat.owner, root.fencing_token(path) or 0

    try:
        counts = check_lock_ownership(
            new_store=new_store,
            operator=root,
            node_of=node_of,
            expire=_expire,
            paths=["/locks/a", "/locks/b"],
            steps=400,
            seed=seed,
            settle_s=5.0,
        )
    finally:
        for store in opened:
            store.close()
    for kind in ("acquire", "release", "stale_release", "expire", "delete", "busy"):
        assert counts[kind] > 0, f"seed {seed} never exercised {kind}: {counts}"
