"""A worker starts again what ended by itself only after a backoff: its assigned
instances and the group's own functions (metadata manager, scheduler) alike.

No broker: the function's code does not load, so each instance ends at once,
before it touches its client; the worker's clock is the test's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from pulsar_state.functions import worker as worker_module
from pulsar_state.functions.function_spec import FunctionSpec
from pulsar_state.functions.instance_slot import MAX_BACKOFF_S, InstanceSlot, restart_backoff_s
from pulsar_state.functions.worker import FunctionWorker
from pulsar_state.functions.worker_config import WorkerConfig

FAILING = FunctionSpec(
    fqn="public/default/grp-metadata-manager",
    class_name="no_such_module_for_a_worker_test.Manager",
    inputs=("persistent://public/default/grp-requests",),
)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _worker(tmp_path: Path, clock: _Clock) -> FunctionWorker:
    config = WorkerConfig(
        service_url="pulsar://127.0.0.1:1", group="grp", worker_id="w1", work_dir=str(tmp_path)
    )
    worker = FunctionWorker(config, clock=clock)
    worker._client = cast(Any, object())  # never used: the code fails to load first
    return worker


def _starts(slot: InstanceSlot, seen: list[Any]) -> int:
    """How many instances the slot has had (each new one waited for until it ends)."""
    if slot.runner is not seen[-1]:
        seen.append(slot.runner)
        assert slot.runner.wait_ended(30)
    return len(seen)


def test_the_backoff_doubles_up_to_its_bound() -> None:
    assert [restart_backoff_s(n) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert restart_backoff_s(10_000) == MAX_BACKOFF_S


def test_a_crashed_system_function_is_started_again_only_after_its_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "system_specs", lambda _config: [FAILING])
    clock = _Clock()
    worker = _worker(tmp_path, clock)
    worker._start_system()

    def slot() -> InstanceSlot:
        return worker._system[f"{FAILING.fqn}:0"]

    first = slot().runner
    assert first.wait_ended(30) and "no_such_module" in str(first.error)
    seen: list[Any] = [first]
    for wait_s in (1.0, 2.0, 4.0):  # each restart waits twice as long
        start = clock.now
        for _ in range(20):  # reconcile after reconcile within the backoff: no restart
            worker._restart_system()
        assert slot().runner is seen[-1], "restarted at once"
        clock.now = start + wait_s - 0.001
        worker._restart_system()
        assert slot().runner is seen[-1], f"restarted before its {wait_s} s backoff"
        clock.now = start + wait_s
        worker._restart_system()
        assert slot().runner is not seen[-1], f"not restarted after its {wait_s} s backoff"
        _starts(slot(), seen)
    assert len(seen) == 4 and slot().restarts == 3


def test_an_assigned_instance_follows_the_same_backoff(tmp_path: Path) -> None:
    clock = _Clock()
    worker = _worker(tmp_path, clock)
    spec = FunctionSpec(fqn="public/default/f", class_name=FAILING.class_name, inputs=("t",))
    worker.wanted = lambda: {"public/default/f:0": spec}  # type: ignore[method-assign]
    worker.reconcile()
    seen: list[Any] = [worker._slots["public/default/f:0"].runner]
    assert seen[0].wait_ended(30)
    for wait_s in (1.0, 2.0):
        start = clock.now
        for _ in range(20):
            worker.reconcile()
        assert worker._slots["public/default/f:0"].runner is seen[-1]
        clock.now = start + wait_s
        worker.reconcile()
        _starts(worker._slots["public/default/f:0"], seen)
    assert len(seen) == 3 and worker._slots["public/default/f:0"].restarts == 2
    status = worker.status()[0]
    assert (status.running, status.restarts) == (False, 2) and status.error
