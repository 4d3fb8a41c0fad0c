"""A functions worker that is not ready yet (503) delays a deploy; it does not fail it.

Seen in a clean-clone ``make run``: right after the embedded broker started,
the worker answered the demo's create with 503 "Leader not yet ready. Please
retry again". This drives the REST client against a local HTTP server that
answers as that worker does (the client's retry logic, no broker).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from pulsar_state.deploy.errors import PulsarAdminError
from pulsar_state.deploy.rest_admin import PulsarAdminRest


class _Worker(BaseHTTPRequestHandler):
    not_ready = 2  # answers before the worker takes requests
    calls: ClassVar[list[str]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        type(self).calls.append(self.command)
        if type(self).not_ready > 0:
            type(self).not_ready -= 1
            body = b'{"reason": "Leader not yet ready. Please retry again"}'
            self.send_response(503)
        else:
            body = b""
            self.send_response(204)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_DELETE = _answer  # noqa: N815 (http.server's names)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def worker() -> Iterator[str]:
    _Worker.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Worker)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_create_waits_while_the_worker_is_not_ready(worker: str, tmp_path: Path) -> None:
    _Worker.not_ready = 2
    code = tmp_path / "fn.py"
    code.write_text("def f(x):\n    return x\n")
    admin = PulsarAdminRest(admin_url=worker, ready_wait_s=30)
    admin.create_function(fqn=("public", "default", "f"), config={}, code=code)
    assert _Worker.calls == ["POST", "POST", "POST"]  # before the fix: one, then an error
    _Worker.not_ready = 1
    assert admin.delete_function(("public", "default", "f")) is True


def test_a_worker_never_ready_is_a_clear_error_in_bounded_time(worker: str, tmp_path: Path) -> None:
    _Worker.not_ready = 10**6
    code = tmp_path / "fn.py"
    code.write_text("def f(x):\n    return x\n")
    admin = PulsarAdminRest(admin_url=worker, ready_wait_s=1)
    with pytest.raises(PulsarAdminError, match="Leader not yet ready"):
        admin.create_function(fqn=("public", "default", "f"), config={}, code=code)
