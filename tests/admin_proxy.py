"""A slow or failing admin API: an HTTP proxy in front of the broker's, for fault tests.

The proxy forwards every request to the real admin API. What it does to them
can be changed while it runs (from the test or a nemesis thread):

* ``delay_s``: each matching request waits this long first (a loaded broker,
  a slow load balancer, a broker failing over);
* ``fail_status``: each matching request is answered with this status
  (e.g. 503) without reaching the broker;
* ``matches``: which requests (by method and path) the two apply to; all by
  default.

It counts what it did (``delayed``, ``failed``, ``forwarded``), so a test can
check that its fault was met, not only configured.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

__all__ = ["AdminProxy", "stats_only"]


def stats_only(method: str, path: str) -> bool:
    """Topic stats requests (a lock checker's and a writer's question)."""
    return method == "GET" and path.split("?", 1)[0].rstrip("/").endswith("/stats")


class AdminProxy:
    """Forwards to ``target``; started at once, ``close()`` stops it."""

    def __init__(
        self,
        target: str,
        *,
        delay_s: float = 0.0,
        fail_status: int | None = None,
        matches: Callable[[str, str], bool] = lambda _method, _path: True,
    ) -> None:
        self.target = target.rstrip("/")
        self.delay_s = delay_s
        self.fail_status = fail_status
        self.matches = matches
        self.delayed = 0
        self.failed = 0
        self.forwarded = 0
        self._counts = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    @contextmanager
    def slow(self, delay_s: float) -> Iterator[None]:
        """Delay matching requests by ``delay_s`` inside the block."""
        before, self.delay_s = self.delay_s, delay_s
        try:
            yield
        finally:
            self.delay_s = before

    @contextmanager
    def failing(self, status: int = 503) -> Iterator[None]:
        """Answer matching requests with ``status`` inside the block."""
        before, self.fail_status = self.fail_status, status
        try:
            yield
        finally:
            self.fail_status = before

    def _count(self, what: str) -> None:
        with self._counts:
            setattr(self, what, getattr(self, what) + 1)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if proxy.matches(self.command, self.path):
                    status = proxy.fail_status
                    if status is not None:
                        proxy._count("failed")
                        self._answer(status, b"admin API unavailable (fault injected)", None)
                        return
                    delay = proxy.delay_s
                    if delay > 0:
                        proxy._count("delayed")
                        time.sleep(delay)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                try:
                    answer = requests.request(
                        self.command,
                        proxy.target + self.path,
                        data=body,
                        headers=headers,
                        timeout=120,
                        allow_redirects=False,
                    )
                except requests.RequestException as exc:  # the broker is away
                    self._answer(502, str(exc).encode(), None)
                    return
                proxy._count("forwarded")
                self._answer(answer.status_code, answer.content, answer.headers.get("Content-Type"))

            def _answer(self, status: int, content: bytes, content_type: str | None) -> None:
                try:
                    self.send_response(status)
                    if content_type:
                        self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(content)))
                    self.end_headers()
                    self.wfile.write(content)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the caller gave up waiting (its timeout): nothing to answer

            def do_GET(self) -> None:
                self._forward()

            def do_PUT(self) -> None:
                self._forward()

            def do_POST(self) -> None:
                self._forward()

            def do_DELETE(self) -> None:
                self._forward()

            def log_message(self, *_: object) -> None:
                pass

        return Handler

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
