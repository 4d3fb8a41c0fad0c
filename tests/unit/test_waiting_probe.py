"""Whether another writer waits is asked off the writer's thread
(state/core/write/waiting_probe.py): the tenure's question near its end never
makes the writer wait for the admin API, however slow it is."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pulsar_state.config import StateConfig
from pulsar_state.core.write.tenure import Tenure, TenureState
from pulsar_state.core.write.waiting_probe import NO_ANSWER, WaitingProbe
from pulsar_state.errors import PermissionDeniedError


class _SlowBroker:
    """``waiting_writers``: answers ``count`` once released, noting the asking thread."""

    def __init__(self, count: int = 0) -> None:
        self.count = count
        self.release = threading.Event()
        self.asked = threading.Event()
        self.threads: list[str] = []

    def __call__(self, *, timeout_s: float) -> int:
        self.threads.append(threading.current_thread().name)
        self.asked.set()
        assert self.release.wait(30), "never released"
        return self.count


def _answered(probe: WaitingProbe, tag: object) -> int:
    """The probe's answer once its question is done (the test waits, the writer never does)."""
    question = probe._question
    assert question is not None
    question.exception(timeout=30)
    return probe.answer(tag=tag)


def test_asking_returns_before_the_broker_answers() -> None:
    broker = _SlowBroker(count=0)
    probe = WaitingProbe("persistent://public/default/t", broker)
    probe.ask(timeout_s=1.0, tag=7)  # would hang here if asked on this thread
    assert broker.asked.wait(30)
    assert broker.threads == ["pss-probe-t"]
    assert probe.asking and probe.answer(tag=7) == NO_ANSWER  # not answered yet: no wait
    probe.ask(timeout_s=1.0, tag=7)  # one question at a time
    broker.release.set()
    assert _answered(probe, 7) == 0
    assert not probe.asking and broker.threads == ["pss-probe-t"]


def test_an_answer_about_another_tenure_is_not_taken() -> None:
    broker = _SlowBroker(count=0)
    broker.release.set()
    probe = WaitingProbe("persistent://public/default/t", broker)
    probe.ask(timeout_s=1.0, tag=7)
    assert _answered(probe, 8) == NO_ANSWER
    assert not probe.asking  # closed: a new question may go out


def test_unknown_answers_and_refusals() -> None:
    def failing(*, timeout_s: float) -> int:
        raise TimeoutError("no answer in time")

    probe = WaitingProbe("persistent://public/default/t", failing)
    probe.ask(timeout_s=1.0, tag=1)
    assert _answered(probe, 1) == NO_ANSWER and probe.enabled

    def refused(*, timeout_s: float) -> int:
        raise PermissionDeniedError("no stats for this role")

    probe = WaitingProbe("persistent://public/default/t", refused)
    probe.ask(timeout_s=1.0, tag=1)
    assert _answered(probe, 1) == NO_ANSWER
    assert not probe.enabled
    probe.ask(timeout_s=1.0, tag=1)
    assert not probe.asking  # never asked again


class _Producer:
    def is_connected(self) -> bool:
        return True

    def close(self) -> None:
        pass


def test_the_tenure_keeps_the_topic_on_the_probes_answer_without_waiting_for_it() -> None:
    """``keep_if_alone`` is called on the writer's thread: it asks and returns,
    and a later call renews the tenure with the answer."""
    broker = _SlowBroker(count=0)
    tailer: Any = object()
    tenure = Tenure(
        client=None,  # type: ignore[arg-type]
        topic="persistent://public/default/tenure-probe",
        tailer=tailer,
        config=StateConfig(),
        writer_id="w",
        compactable=False,
        waiting_writers=broker,
    )
    tenure._move(TenureState.ACQUIRING)
    tenure.producer, tenure.epoch = _Producer(), 7  # type: ignore[assignment]
    tenure._move(TenureState.HOLDING)
    limit = StateConfig().max_tenure_s
    assert limit is not None
    tenure._held_since = time.monotonic() - limit  # the tenure is over
    assert tenure.tenure_over(busy=False)
    tenure.keep_if_alone()  # would hang here if the broker were asked on this thread
    assert broker.asked.wait(30)
    assert threading.current_thread().name not in broker.threads
    assert tenure.tenure_over(busy=False)  # no answer yet: the tenure still ends
    broker.release.set()
    probe = tenure._probe
    assert probe is not None and probe._question is not None
    probe._question.exception(timeout=30)
    tenure.keep_if_alone()
    assert not tenure.tenure_over(busy=False)  # nobody waits: a new tenure began


def test_no_thread_to_ask_on_is_an_unknown_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """At interpreter shutdown no thread can start: the tenure ends as if
    unknown, and the writer's loop does not die of it."""

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    broker = _SlowBroker(count=0)
    probe = WaitingProbe("persistent://public/default/t", broker)
    monkeypatch.setattr(threading.Thread, "start", refuse)
    probe.ask(timeout_s=1.0, tag=3)
    assert probe.answer(tag=3) == NO_ANSWER and not probe.asking and probe.enabled
    assert broker.threads == []
