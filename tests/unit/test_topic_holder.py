"""Losing the topic is counted as a fence however the writer learnt of it."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from prometheus_client import REGISTRY

from pulsar_state.config import StateConfig
from pulsar_state.errors import FencedError
from pulsar_state.topic_holder import TopicHolder


def _fences(topic: str) -> float:
    return REGISTRY.get_sample_value("pulsar_state_fences_total", {"topic": topic}) or 0.0


def _holder(topic: str) -> TopicHolder:
    # lost() touches neither the client nor the tailer: it counts and lets go
    tailer: Any = object()
    return TopicHolder(
        client=None,  # type: ignore[arg-type]
        topic=topic,
        tailer=tailer,
        config=StateConfig(),
        writer_id="w",
        compactable=False,
    )


@pytest.mark.parametrize(
    "exc",
    [
        FencedError("a write landed stale: another writer holds the topic"),
        pulsar.ProducerFenced("ResultProducerFenced"),
    ],
    ids=["stale-write", "producer-fenced"],
)
def test_a_lost_tenure_counts_as_a_fence(exc: BaseException) -> None:
    topic = f"persistent://public/default/holder-{type(exc).__name__}"
    holder = _holder(topic)
    before = _fences(topic)
    holder.lost(exc)
    assert _fences(topic) == before + 1
    assert holder.losses == 1 and holder.producer is None


def test_a_timeout_is_not_a_fence() -> None:
    topic = "persistent://public/default/holder-timeout"
    holder = _holder(topic)
    holder.lost(pulsar.Timeout("ResultTimeout"))
    assert _fences(topic) == 0.0
    assert holder.losses == 1
