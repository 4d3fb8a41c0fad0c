"""``pulsar-state sink run --config sink.yaml``: the SQL sink's runner
(:func:`~pulsar_state.connectors.sink_runner.run_sink`, whose docstring has the
config keys) from the shell.

SIGINT and SIGTERM stop the runner between two records; a second one
interrupts at once. ``--metrics-port`` serves Prometheus metrics and
``/healthz`` (:mod:`~pulsar_state.connectors.sink_health`).
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import click
import yaml

from pulsar_state.cli.exit_codes import EXIT_CODES_EPILOG
from pulsar_state.cli.options import auth_options, cluster_auth
from pulsar_state.connectors.sink_health import MetricsServer, SinkHealth
from pulsar_state.connectors.sink_runner import run_sink

__all__ = ["sink"]

log = logging.getLogger(__name__)


@click.group(epilog=EXIT_CODES_EPILOG)
def sink() -> None:
    """The SQL sink (SQLite or PostgreSQL) outside the functions runtime."""


@sink.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
)
@click.option(
    "--max-idle-s", type=float, default=None, help="Stop after this long without records."
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics (/metrics) and health (/healthz: 200 while connected "
    "and consuming, else 503) on this port; 0 picks a free one.",
)
@click.option(
    "--metrics-addr",
    default="0.0.0.0",
    show_default=True,
    help="The address the metrics server listens on.",
)
@auth_options
def run(
    config_path: Path,
    max_idle_s: float | None,
    metrics_port: int | None,
    metrics_addr: str,
    **auth_opts: Any,
) -> None:
    """Consume the topic and upsert its records into the table.

    Authentication and TLS come from the --auth-* and --tls-* options or from the
    config's authPlugin, authParams, tlsTrustCertsFilePath and
    tlsAllowInsecureConnection: an option given on the command line wins over the
    config's key; either applies to every call (broker, admin API).
    """
    data = yaml.safe_load(config_path.read_text())
    if not isinstance(data, dict):
        raise click.ClickException(f"{config_path}: a sink config is a mapping")
    auth = cluster_auth(auth_opts)
    health = SinkHealth()
    server = None
    if metrics_port is not None:
        try:
            server = MetricsServer(port=metrics_port, addr=metrics_addr, health=health)
        except OSError as exc:
            raise click.ClickException(
                f"cannot serve metrics on {metrics_addr}:{metrics_port}: {exc}"
            ) from exc
        click.echo(f"metrics on port {server.port} (/metrics, /healthz)", err=True)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        log.info("signal %d: stopping", signum)
        stop.set()

    # a clean stop between two records; a second signal still interrupts at once
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        done = run_sink(data, max_idle_s=max_idle_s, stop=stop, auth=auth, health=health)
    except KeyboardInterrupt:
        return
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if server is not None:
            server.close()
    click.echo(f"written {done.written}, skipped {done.skipped}, poisoned {done.poisoned}")
