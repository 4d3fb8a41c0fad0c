"""``pulsar-state sink run --metrics-port``: Prometheus metrics and a health endpoint.

One HTTP server (``prometheus_client``'s WSGI app and threading server) answers

* ``/metrics`` (and any other path): ``prometheus_client``'s default registry,
  the state core's ``pulsar_state_*`` metrics and the sink's
  ``pulsar_state_sink_*`` ones included;
* ``/healthz`` and ``/health``: ``200`` while the runner is connected and
  consuming (its source is open, its consumer connected to the broker, and
  the last write did not fail), ``503`` otherwise, with the reason as text.

A write the database refuses for a while (retried in place) makes the runner
unhealthy until a write succeeds again; so does a consumer that lost its
broker connection, and the time before the source is open or after it closed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

__all__ = ["SINK_HEALTHY", "SINK_RECORDS", "MetricsServer", "SinkHealth"]

log = logging.getLogger(__name__)

SINK_RECORDS = Counter(
    "pulsar_state_sink_records",
    "Records the sink runner handled, by outcome (written, skipped as redelivered, "
    "poisoned, held back unacknowledged after a takeover)",
    ["outcome"],
)
SINK_HEALTHY = Gauge(
    "pulsar_state_sink_healthy", "1 while the sink runner is connected and consuming, else 0"
)

_HEALTH_PATHS = ("/healthz", "/health")


class SinkHealth:
    """Whether the runner is connected and consuming (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connected: Callable[[], bool] | None = None
        self._failing: str | None = None

    def consuming(self, connected: Callable[[], bool] | None) -> None:
        """The source is open (``connected`` says if its consumers reach the broker), or
        closed (``None``)."""
        with self._lock:
            self._connected = connected

    def write_failed(self, reason: str) -> None:
        with self._lock:
            self._failing = reason

    def write_succeeded(self) -> None:
        with self._lock:
            self._failing = None

    def status(self) -> tuple[bool, str]:
        with self._lock:
            connected, failing = self._connected, self._failing
        if connected is None:
            healthy, reason = False, "not consuming: the source is not open"
        elif failing is not None:
            healthy, reason = False, f"writes are failing: {failing}"
        else:
            try:
                up = connected()
            except Exception as exc:  # a probe never takes the server down
                log.debug("connection probe failed", exc_info=True)
                up, reason = False, f"connection probe failed: {exc}"
            else:
                reason = "consuming" if up else "not connected to the broker"
            healthy = up
        SINK_HEALTHY.set(1 if healthy else 0)
        return healthy, reason


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics server: %s", format % args)


class MetricsServer:
    """Serves ``registry`` and ``health`` on ``addr:port`` from a daemon thread."""

    def __init__(
        self,
        *,
        port: int,
        health: SinkHealth,
        addr: str = "0.0.0.0",
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        metrics_app = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("PATH_INFO") in _HEALTH_PATHS:
                healthy, reason = health.status()
                status = "200 OK" if healthy else "503 Service Unavailable"
                start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
                return [f"{reason}\n".encode()]
            return metrics_app(environ, start_response)  # type: ignore[no-any-return]

        self._httpd = make_server(
            addr, port, app, server_class=ThreadingWSGIServer, handler_class=_QuietHandler
        )
        self.port = self._httpd.server_port
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="sink-metrics", daemon=True
        )
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics, health on /healthz", addr, self.port)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)
