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
