"""Pulsar's admin route for function state, read-only, over HTTP (``pulsar-state serve``).

It answers one route as Pulsar's functions worker does,
``GET /admin/v3/functions/{tenant}/{namespace}/{function}/state/{key}``: 200
with the ``FunctionState`` JSON, or an error with Pulsar's ``{"reason": ...}``
body (404 for a missing function or key, 400 for a bad request, 403 when the
cluster refuses this server's role, 503 when the cluster does not answer).
Any other path is a 404 and any other method a 405: nothing can be changed
through it. So the distribution's own
``bin/pulsar-admin --admin-url http://127.0.0.1:P functions querystate ...``
works against it unchanged.

The server reads with its own client and credentials (``--auth-plugin`` and
``--auth-params``, or ``--auth-token``) and checks none of its callers': it
listens on 127.0.0.1 unless told otherwise (``--host``), and whoever reaches
it can read every function's state that its role can read. Requests run on
threads (``ThreadingHTTPServer``); one read-only view per state topic is kept
open and caught up per request (:mod:`~pulsar_state.functions.queryable_state`).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from pulsar_state.errors import (
    AdminUnreachableError,
    NotFoundError,
    OperationTimeoutError,
    PermissionDeniedError,
    PulsarStateError,
)
from pulsar_state.functions.queryable_state import FunctionStateReader

__all__ = ["ROUTE_TEXT", "FunctionStateServer"]

log = logging.getLogger(__name__)

ROUTE = re.compile(r"^/admin/v3/functions/([^/]+)/([^/]+)/([^/]+)/state/(.+)$")
ROUTE_TEXT = "GET /admin/v3/functions/{tenant}/{namespace}/{function}/state/{key}"


def _status_of(exc: Exception) -> HTTPStatus:
    if isinstance(exc, NotFoundError):
        return HTTPStatus.NOT_FOUND
    if isinstance(exc, PermissionDeniedError):
        return HTTPStatus.FORBIDDEN
    if isinstance(exc, AdminUnreachableError | OperationTimeoutError):
        return HTTPStatus.SERVICE_UNAVAILABLE
    if isinstance(exc, ValueError):
        return HTTPStatus.BAD_REQUEST
    return HTTPStatus.INTERNAL_SERVER_ERROR


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "pulsar-state"

    def _send(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        found = ROUTE.match(urlsplit(self.path).path)
        if found is None:
            self._send(HTTPStatus.NOT_FOUND, {"reason": f"not found; served: {ROUTE_TEXT}"})
            return
        tenant, namespace, function, key = (unquote(part) for part in found.groups())
        try:
            state = self.server.reader.query(tenant, namespace, function, key)
        except (PulsarStateError, ValueError) as exc:
            status = _status_of(exc)
            if status >= 500:
                log.warning("GET %s failed: %s", self.path, exc)
            self._send(status, {"reason": str(exc)})
        except Exception as exc:  # a request never takes the server down
            log.exception("GET %s failed", self.path)
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"reason": f"internal error: {exc}"})
        else:
            self._send(HTTPStatus.OK, state)

    def _read_only(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"reason": f"read-only; served: {ROUTE_TEXT}"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _read_only  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], reader: FunctionStateReader) -> None:
        self.reader = reader
        super().__init__(address, _Handler)


class FunctionStateServer:
    """The read-only state route on ``host:port`` (0: any free port); see the module."""

    def __init__(self, *, reader: FunctionStateReader, host: str = "127.0.0.1", port: int = 0):
        self._server = _Server((host, port), reader)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def serve_forever(self) -> None:
        self._server.serve_forever(poll_interval=0.5)

    def start(self) -> None:
        """Serve on a daemon thread."""
        self._thread = threading.Thread(target=self.serve_forever, name="state-server", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving (waits for the loop to end, up to 10 s) and close the socket."""
        self._server.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server.server_close()
