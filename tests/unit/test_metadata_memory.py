"""The conformance suite against the in-memory reference store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from metadata_conformance import *  # noqa: F403  (the shared tests)
from metadata_conformance import StoreFactory

from pulsar_state import BaseMetadataStore, MemoryMetadataStore
from pulsar_state.config import StateConfig


@pytest.fixture
def base() -> str:
    return "/conf"


@pytest.fixture
def stores() -> Iterator[StoreFactory]:
    root = MemoryMetadataStore()
    opened = [root]

    def open_store(config: StateConfig | None = None) -> BaseMetadataStore:
        store = root.sibling(config=config)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


class MemorySessionFaults:
    """A session lost as when cut off past its timeout: its nodes are dropped."""

    def lose(self, store: BaseMetadataStore) -> None:
        assert isinstance(store, MemoryMetadataStore)
        store.expire_session()

    def restore(self, store: BaseMetadataStore) -> None:
        assert isinstance(store, MemoryMetadataStore)
        store.reestablish_session()


@pytest.fixture
def session_faults() -> MemorySessionFaults:
    return MemorySessionFaults()
