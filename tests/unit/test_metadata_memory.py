"""The conformance suite against the in-memory reference store."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from metadata_conformance import *  # noqa: F403  (the shared tests)

from pulsar_state import BaseMetadataStore, MemoryMetadataStore


@pytest.fixture
def base() -> str:
    return "/conf"


@pytest.fixture
def stores() -> Iterator[Callable[[], BaseMetadataStore]]:
    root = MemoryMetadataStore()
    opened = [root]

    def open_store() -> BaseMetadataStore:
        store = root.sibling()
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
