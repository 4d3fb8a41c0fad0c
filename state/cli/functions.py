"""``pulsar-state functions querystate`` and ``pulsar-state serve``: function state from the shell.

``querystate`` reads a function's state key, spelled like pulsar-admin's.

``pulsar-state functions querystate --tenant T --namespace N --name F --key K
[--watch]`` (or ``--fqfn T/N/F``; tenant and namespace default to ``public``
and ``default``, as in ``pulsar-admin``) prints the key's ``FunctionState``
JSON (``key``, ``stringValue`` / ``byteValue`` / ``numberValue``, ``version``;
``byteValue`` in base64 as the REST API gives it) from the function's state
topic, found by its name (:mod:`~pulsar_state.functions.queryable_state`).
Read-only. A missing function or key is a clear message on stderr and exit
code 3; ``--watch`` prints the value again each time it changes (a missing key
is reported once and waited for), until interrupted. ``--output json`` prints
each FunctionState on one line instead of indented.

``serve`` answers Pulsar's admin route for function state over HTTP
(:class:`~pulsar_state.functions.state_server.FunctionStateServer`) until
stopped. Both take ``--timeout`` (seconds per read, 30 by default) and exit
with the codes of every command (:mod:`.exit_codes`).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import click

from pulsar_state.cli.exit_codes import EXIT_CODES_EPILOG
from pulsar_state.cli.options import (
    admin_endpoint,
    cluster_auth,
    cluster_client,
    cluster_options,
    output_option,
    timeout_option,
)
from pulsar_state.errors import NotFoundError
from pulsar_state.functions.queryable_state import FunctionNotFoundError, FunctionStateReader
from pulsar_state.functions.state_server import ROUTE_TEXT, FunctionStateServer

__all__ = ["functions_group", "serve"]


@click.group("functions", epilog=EXIT_CODES_EPILOG)
def functions_group() -> None:
    """Read what Pulsar Functions keep in the shared state."""


@functions_group.command()
@click.option("--tenant", default="public", show_default=True, help="The function's tenant.")
@click.option("--namespace", default="default", show_default=True, help="The function's namespace.")
@click.option("--name", help="The function's name.")
@click.option("--fqfn", help="The function as tenant/namespace/name (instead of the three).")
@click.option("-k", "--key", required=True, help="The state key.")
@click.option("-w", "--watch", is_flag=True, help="Print the value again whenever it changes.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Seconds between reads with --watch.",
)
@timeout_option
@output_option
@cluster_options
def querystate(
    *,
    tenant: str,
    namespace: str,
    name: str | None,
    fqfn: str | None,
    key: str,
    watch: bool,
    interval: float,
    timeout: float,
    fmt: str,
    **cluster: Any,
) -> None:
    """Print a function's state KEY as Pulsar's FunctionState JSON (indented; --output
    json: one line); exit 3 if the function or KEY is not found."""
    if not key:
        raise click.BadParameter("must not be empty", param_hint="--key")
    tenant, namespace, name = _function(tenant, namespace, name, fqfn)
    with _state_reader(cluster, timeout) as reader:
        if not watch:
            _print(reader.query(tenant, namespace, name, key), fmt)
            return
        _watch(reader, (tenant, namespace, name), key, interval, fmt)


@contextlib.contextmanager
def _state_reader(cluster: dict[str, Any], timeout: float) -> Iterator[FunctionStateReader]:
    """A reader of functions' state on the cluster of the command's options; closed after."""
    auth = cluster_auth(cluster)
    with cluster_client(cluster["service_url"], timeout, auth) as client:
        reader = FunctionStateReader(
            client=client,
            admin=admin_endpoint(cluster, auth),
            timeout_s=timeout,
        )
        try:
            yield reader
        finally:
            reader.close()


def _function(
    tenant: str, namespace: str, name: str | None, fqfn: str | None
) -> tuple[str, str, str]:
    """The function's (tenant, namespace, name), from --fqfn or the three options."""
    if fqfn is not None:
        if name is not None:
            raise click.UsageError("give --fqfn or --name, not both")
        parts = fqfn.split("/")
        if len(parts) != 3 or not all(parts):
            raise click.BadParameter(
                f"expected tenant/namespace/name, got {fqfn!r}", param_hint="--fqfn"
            )
        return parts[0], parts[1], parts[2]
    if not name:
        raise click.UsageError("give the function: --name (with --tenant, --namespace) or --fqfn")
    return tenant, namespace, name


def _print(state: dict[str, Any], fmt: str) -> None:
    click.echo(json.dumps(state) if fmt == "json" else json.dumps(state, indent=2))
    sys.stdout.flush()


def _watch(
    reader: FunctionStateReader, fqn: tuple[str, str, str], key: str, interval: float, fmt: str
) -> None:
    """Print each new value until interrupted; a missing function ends it (exit 3)."""
    last: dict[str, Any] | str | None = None
    while True:
        try:
            state: dict[str, Any] | str = reader.query(*fqn, key)
        except FunctionNotFoundError:
            raise
        except NotFoundError as exc:
            state = str(exc)
        if state != last:
            if isinstance(state, str):
                click.echo(state, err=True)
            else:
                _print(state, fmt)
            last = state
        time.sleep(interval)


@click.command()
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@timeout_option
@cluster_options
def serve(
    *,
    port: int,
    host: str,
    timeout: float,
    **cluster: Any,
) -> None:
    """Answer Pulsar's admin route for function state, read-only, until stopped.

    GET /admin/v3/functions/{tenant}/{namespace}/{function}/state/{key}: what
    `pulsar-admin --admin-url http://HOST:PORT functions querystate` asks.
    """
    with _state_reader(cluster, timeout) as reader:
        try:
            server = FunctionStateServer(reader=reader, host=host, port=port)
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from exc
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        server.start()
        click.echo(f"serving function state ({ROUTE_TEXT}) on {server.url}")
        try:
            while not stop.wait(0.5):
                pass
        finally:
            server.close()
