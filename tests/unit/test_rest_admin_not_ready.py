"""A functions worker that is not ready yet (503) delays a deploy; it does not fail it.

Seen in a clean-clone ``make run``: right after the embedded broker started,
the worker answered the demo's create with 503 "Leader not yet ready. Please
retry again". This drives the REST client against a local HTTP server that
answers as that worker does (the client's retry logic, no broker).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import pytest
from http_stub import serving

from pulsar_state.deploy.errors import PulsarAdminError
from pulsar_state.deploy.rest_admin import PulsarAdminRest


class _Worker(BaseHTTPRequestHandler):
    """Answers as Pulsar 4.0.8's worker did: a create refused with 503 has stored
    its code package already, and a create finding it answers 500."""

    not_ready = 2  # answers before the worker takes requests
    calls: ClassVar[list[str]] = []
    packages: ClassVar[set[str]] = set()

    def _reply(self, status: int, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        type(self).calls.append(f"{self.command} {self.path.split('/')[3]}")
        if self.path.startswith("/admin/v3/packages/"):
            if self.command == "GET":
                self._reply(200, json.dumps(sorted(type(self).packages)).encode())
            else:
                type(self).packages.discard(self.path.rsplit("/", 1)[1])
                self._reply(204)
            return
        if self.command == "POST" and type(self).packages:
            self._reply(500, b'{"reason": "Package metadata already exists"}')
            return
        if type(self).not_ready > 0:
            type(self).not_ready -= 1
            if self.command == "POST":
                type(self).packages.add("0")
            self._reply(503, b'{"reason": "Leader not yet ready. Please retry again"}')
            return
        self._reply(204)

    do_GET = do_POST = do_DELETE = _answer  # noqa: N815 (http.server's names)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def worker() -> Iterator[str]:
    _Worker.calls = []
    _Worker.packages = set()
    with serving(_Worker) as url:
        yield url


def test_a_create_waits_while_the_worker_is_not_ready(worker: str, tmp_path: Path) -> None:
    _Worker.not_ready = 2
    code = tmp_path / "fn.py"
    code.write_text("def f(x):\n    return x\n")
    admin = PulsarAdminRest(admin_url=worker, ready_wait_s=30)
    admin.create_function(fqn=("public", "default", "f"), config={}, code=code)
    # before the fix: one POST, then the 503 as an error; then, resending, the
    # package the refused create had stored made it fail "already exists"
    assert _Worker.calls == [
        "POST functions",
        "GET packages",
        "DELETE packages",
        "POST functions",
        "GET packages",
        "DELETE packages",
        "POST functions",
    ]
    _Worker.not_ready = 1
    assert admin.delete_function(("public", "default", "f")) is True


def test_a_worker_never_ready_is_a_clear_error_in_bounded_time(worker: str, tmp_path: Path) -> None:
    _Worker.not_ready = 10**6
    code = tmp_path / "fn.py"
    code.write_text("def f(x):\n    return x\n")
    admin = PulsarAdminRest(admin_url=worker, ready_wait_s=1)
    with pytest.raises(PulsarAdminError, match="Leader not yet ready"):
        admin.create_function(fqn=("public", "default", "f"), config={}, code=code)
