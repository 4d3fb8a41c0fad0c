"""The map suite (``tests/map_conformance.py``) against ``MemoryPulsarMap``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from map_conformance import *  # noqa: F403  (the shared tests)
from map_conformance import MapFactory

from pulsar_state import MemoryPulsarMap
from pulsar_state.config import StateConfig


@pytest.fixture
def maps() -> Iterator[MapFactory]:
    opened: list[MemoryPulsarMap[str, Any]] = []

    def open_map(config: StateConfig | None = None) -> MemoryPulsarMap[str, Any]:
        m = MemoryPulsarMap[str, Any](config=config)
        opened.append(m)
        return m

    yield open_map
    for m in opened:
        m.close()
