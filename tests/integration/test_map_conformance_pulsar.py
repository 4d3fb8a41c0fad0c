"""The map suite (``tests/map_conformance.py``) against ``PulsarMap`` on the broker."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest
from harness import unique_topic
from map_conformance import *  # noqa: F403  (the shared tests)
from map_conformance import MapFactory

from pulsar_state import PulsarMap
from pulsar_state.config import StateConfig


@pytest.fixture
def maps(make_client: Callable[[], pulsar.Client], admin_url: str) -> Iterator[MapFactory]:
    client = make_client()
    opened: list[PulsarMap[str, Any]] = []

    def open_map(config: StateConfig | None = None) -> PulsarMap[str, Any]:
        m = PulsarMap[str, Any](
            client, unique_topic("conf-map"), admin_url=admin_url, config=config, checkpoints=False
        )
        opened.append(m)
        return m

    yield open_map
    for m in opened:
        m.close()
