"""An instance that never comes up is restarted through the admin API, once.

Seen in a clean-clone ``make run`` (2026-11-26): the functions worker gave the
scheduler's instance 1, as its metrics port, the port it had given instance 0
for its control server. Instance 1 failed to bind it ("Address already in use"),
and the worker's own restarts after failed health checks reused the same
ports, so ``wait_ready`` waited out its 180 s and the demo failed. A restart
through the admin API starts the instance with new ports (checked on the real
worker in ``tests/integration/test_python_functions.py``). This drives
:class:`DeployedFunction` against a local HTTP server answering as that worker
did (the decision logic, no broker).
"""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest
from http_stub import reply_json, serving

from pulsar_state.deploy.errors import FunctionNotReadyError
from pulsar_state.deploy.function_ready import DeployedFunction

FQN = ("public", "default", "sched")
INPUT = "persistent://public/default/heartbeats"


class _Worker(BaseHTTPRequestHandler):
    """Two instances; instance 1 is stuck until restarted (``heals``)."""

    heals = True
    calls: ClassVar[list[str]] = []
    restarted: ClassVar[set[int]] = set()

    def _instances(self) -> list[dict[str, Any]]:
        up = 1 in self.restarted and self.heals
        stuck = {"running": False, "error": "UNAVAILABLE: io exception"}
        return [
            {"instanceId": 0, "status": {"running": True, "error": ""}},
            {"instanceId": 1, "status": {"running": True, "error": ""} if up else stuck},
        ]

    def do_GET(self) -> None:
        self.calls.append(f"GET {self.path}")
        if self.path.endswith("/status"):
            instances = self._instances()
            running = sum(1 for i in instances if i["status"]["running"])
            reply_json(
                self, 200, {"numInstances": 2, "numRunning": running, "instances": instances}
            )
        else:  # the input's stats: the function's subscription with its consumers
            consumers: list[dict[str, Any]] = [{}] * sum(
                1 for i in self._instances() if i["status"]["running"]
            )
            reply_json(self, 200, {"subscriptions": {"/".join(FQN): {"consumers": consumers}}})

    def do_POST(self) -> None:
        self.calls.append(f"POST {self.path}")
        self.restarted.add(int(self.path.rstrip("/").split("/")[-2]))
        reply_json(self, 204, {})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def worker() -> Iterator[str]:
    _Worker.calls, _Worker.restarted, _Worker.heals = [], set(), True
    with serving(_Worker) as url:
        yield url


def _restarts() -> list[str]:
    return [c for c in _Worker.calls if c.startswith("POST")]


def test_a_stuck_instance_is_restarted_once_then_ready(worker: str) -> None:
    with DeployedFunction(admin_url=worker, fqn=FQN) as function:
        function.wait_ready(inputs=[INPUT], instances=2, timeout_s=20, restart_after_s=0.5)
    assert _restarts() == ["POST /admin/v3/functions/public/default/sched/1/restart"]


def test_nothing_is_restarted_before_its_time_nor_twice(worker: str) -> None:
    _Worker.heals = False  # stays stuck: one restart, then the wait runs out
    with (
        DeployedFunction(admin_url=worker, fqn=FQN) as function,
        pytest.raises(FunctionNotReadyError, match="1/2 instances running"),
    ):
        function.wait_ready(inputs=[INPUT], instances=2, timeout_s=3, restart_after_s=1)
    assert _restarts() == ["POST /admin/v3/functions/public/default/sched/1/restart"]
    statuses = [c for c in _Worker.calls if c.endswith("/status")]
    assert len(statuses) > 2  # it kept looking, restarting no more


def test_no_restart_when_told_not_to(worker: str) -> None:
    with (
        DeployedFunction(admin_url=worker, fqn=FQN) as function,
        pytest.raises(FunctionNotReadyError),
    ):
        function.wait_ready(inputs=[INPUT], instances=2, timeout_s=1.5, restart_after_s=None)
    assert _restarts() == []
