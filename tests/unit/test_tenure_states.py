"""The tenure's state machine (state/core/write/tenure.py), without a broker:
its moves, and how losing the topic is counted."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from prometheus_client import REGISTRY

from pulsar_state.config import StateConfig
from pulsar_state.core.write.tenure import Tenure, TenureState, TenureTransitionError
from pulsar_state.errors import FencedError


def _fences(topic: str) -> float:
    return REGISTRY.get_sample_value("pulsar_state_fences_total", {"topic": topic}) or 0.0


class _Producer:
    closed = False

    def is_connected(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True


def _holding(topic: str) -> tuple[Tenure, _Producer]:
    """A tenure that holds the topic (moved there by hand: gaining it needs a broker)."""
    tailer: Any = object()
    tenure = Tenure(
        client=None,  # type: ignore[arg-type]
        topic=topic,
        tailer=tailer,
        config=StateConfig(),
        writer_id="w",
        compactable=False,
    )
    producer = _Producer()
    tenure._move(TenureState.ACQUIRING)
    tenure.producer, tenure.epoch = producer, 7  # type: ignore[assignment]
    tenure._move(TenureState.HOLDING)
    return tenure, producer


@pytest.mark.parametrize(
    "exc",
    [
        FencedError("a write landed stale: another writer holds the topic"),
        pulsar.ProducerFenced("ResultProducerFenced"),
    ],
    ids=["stale-write", "producer-fenced"],
)
def test_a_doubt_from_being_fenced_counts_as_a_fence(exc: BaseException) -> None:
    topic = f"persistent://public/default/tenure-{type(exc).__name__}"
    tenure, producer = _holding(topic)
    before = _fences(topic)
    tenure.doubt(exc)
    assert _fences(topic) == before + 1
    assert tenure.losses == 1 and tenure.producer is None and producer.closed
    assert tenure.state is TenureState.IN_DOUBT and tenure.in_doubt


def test_a_timeout_is_a_doubt_not_a_fence() -> None:
    topic = "persistent://public/default/tenure-timeout"
    tenure, _ = _holding(topic)
    tenure.doubt(pulsar.Timeout("ResultTimeout"))
    assert _fences(topic) == 0.0
    assert tenure.losses == 1 and tenure.state is TenureState.IN_DOUBT


def test_release_goes_through_releasing_to_idle() -> None:
    tenure, producer = _holding("persistent://public/default/tenure-release")
    tenure.release()
    assert tenure.state is TenureState.IDLE and producer.closed and tenure.epoch is None
    assert tenure.history[-2:] == [
        (TenureState.HOLDING, TenureState.RELEASING),
        (TenureState.RELEASING, TenureState.IDLE),
    ]


def test_in_doubt_leaves_only_by_a_new_tenure_or_close() -> None:
    tenure, _ = _holding("persistent://public/default/tenure-doubt")
    tenure.doubt(pulsar.Timeout("ResultTimeout"))
    with pytest.raises(TenureTransitionError):
        tenure.release()  # letting go would forget the writes in doubt
    with pytest.raises(TenureTransitionError):
        tenure._move(TenureState.HOLDING)
    tenure.close()
    assert tenure.state is TenureState.CLOSED
    tenure.close()  # idempotent
    with pytest.raises(TenureTransitionError):
        tenure._move(TenureState.ACQUIRING)  # closed for good
