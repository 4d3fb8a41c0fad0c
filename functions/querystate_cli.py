"""``pulsar-state functions querystate``: a function's state key, spelled like pulsar-admin's.

``pulsar-state functions querystate --tenant T --namespace N --name F --key K
[--watch]`` (or ``--fqfn T/N/F``; tenant and namespace default to ``public``
and ``default``, as in ``pulsar-admin``) prints the key's ``FunctionState``
JSON (``key``, ``stringValue`` / ``byteValue`` / ``numberValue``, ``version``;
``byteValue`` in base64 as the REST API gives it) from the function's state
topic, found by its name (:mod:`~pulsar_state.functions.queryable_state`).
Read-only. A missing function or key is a clear message on stderr and exit
code 3; ``--watch`` prints the value again each time it changes (a missing key
is reported once and waited for), until interrupted.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import click
import pulsar

from pulsar_state.cli_options import (
    TopicMissingError,
    admin_headers,
    cluster_auth,
    cluster_client,
    cluster_options,
)
from pulsar_state.errors import NotFoundError, PulsarStateError
from pulsar_state.functions.queryable_state import FunctionNotFoundError, FunctionStateReader

__all__ = ["functions_group"]


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """Library errors as CLI errors: not found is exit 3, the rest exit 1; no traceback."""
    try:
        yield
    except NotFoundError as exc:
        raise TopicMissingError(str(exc)) from exc
    except PulsarStateError as exc:
        raise click.ClickException(str(exc)) from exc
    except pulsar.PulsarException as exc:
        raise click.ClickException(f"Pulsar error: {exc}") from exc
    except ValueError as exc:
        raise click.ClickException(f"invalid input: {exc}") from exc


@click.group("functions")
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
    "--interval", default=1.0, show_default=True, help="Seconds between reads with --watch."
)
@click.option("--timeout", default=30.0, show_default=True, help="Seconds per read.")
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
    **cluster: Any,
) -> None:
    """Print a function's state KEY as Pulsar's FunctionState JSON; exit 3 if not found."""
    if timeout <= 0 or interval <= 0:
        raise click.BadParameter("--timeout and --interval must be > 0")
    if not key:
        raise click.BadParameter("must not be empty", param_hint="--key")
    tenant, namespace, name = _function(tenant, namespace, name, fqfn)
    auth = cluster_auth(cluster)
    with (
        cluster_client(cluster["service_url"], timeout, auth) as client,
        _errors(),
    ):
        reader = FunctionStateReader(
            client=client,
            admin_url=cluster["admin_url"],
            admin_headers=admin_headers(auth),
            timeout_s=timeout,
        )
        try:
            if not watch:
                _print(reader.query(tenant, namespace, name, key))
                return
            _watch(reader, (tenant, namespace, name), key, interval)
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


def _print(state: dict[str, Any]) -> None:
    click.echo(json.dumps(state, indent=2))
    sys.stdout.flush()


def _watch(
    reader: FunctionStateReader, fqn: tuple[str, str, str], key: str, interval: float
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
                _print(state)
            last = state
        time.sleep(interval)
