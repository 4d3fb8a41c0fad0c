"""``pulsar-state functions ...``, ``pulsar-state serve``: functions and their state, from a shell.

``create``, ``update``, ``delete``, ``get``, ``list`` and ``status`` manage the
functions a group of ``pulsar-state worker`` processes runs, spelled as
``pulsar-admin functions`` spells them (``--py``, ``--classname``,
``--inputs``, ``--output``, ``--user-config``, ``--parallelism``,
``--processing-guarantees``, ``--retain-ordering``, ``--subs-name``,
``--subs-position``). Writes go through the group's metadata manager
(:class:`~pulsar_state.functions.function_admin.FunctionAdmin`), which
versions the records: ``update`` changes only the options given, on the
version it read (``--expected-version`` pins another), and a record changed
meanwhile is refused as stale (exit 1), as is a ``delete
--expected-version`` of an old version. ``status`` prints, as ``pulsar-admin
functions status`` does, each instance's status: the worker it is assigned
to (``workerId``), ``running`` (that worker is alive and runs it), and the
counters that worker publishes into the group's status map (``numReceived``,
``numSuccessfullyProcessed``, ``numUserExceptions``, ``latestUserExceptions``,
``numSystemExceptions``, ``numRestarts``, ``averageLatency``...). ``--group`` and
``--functions-namespace`` name the group (as for ``pulsar-state worker``).
``--py FILE`` uploads the file into the group's package store and the record
names it by sha256 (``package: pss://sha256/<hex>``), so no worker needs to
see the file; ``file://PATH`` or an ``http(s)://`` URL is recorded as given.

``querystate`` reads a function's state key, spelled like pulsar-admin's.

``pulsar-state functions querystate --tenant T --namespace N --name F --key K
[--watch]`` (or ``--fqfn T/N/F``; tenant and namespace default to ``public``
and ``default``, as in ``pulsar-admin``) prints the key's ``FunctionState``
JSON (``key``, ``stringValue`` / ``byteValue`` / ``numberValue``, ``version``;
``byteValue`` in base64 as the REST API gives it) from the function's state
topic, found by its name (:mod:`~pulsar_state.functions.queryable_state`):
the ``userConfig.stateTopic`` Pulsar's admin API gives, else the one of the
record of the ``--group`` of ``pulsar-state worker`` s (the default group,
``pss-functions``, unless given; ``serve`` takes it too), else the kit's default.
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

from pulsar_state.cli.exit_codes import EXIT_CODES_EPILOG, NotFoundExit
from pulsar_state.cli.options import (
    admin_endpoint,
    cluster_auth,
    cluster_client,
    cluster_options,
    output_option,
    timeout_option,
)
from pulsar_state.cli.worker import group_options
from pulsar_state.errors import NotFoundError
from pulsar_state.functions.function_admin import FunctionAdmin
from pulsar_state.functions.metadata_manager import GUARANTEES, POSITIONS
from pulsar_state.functions.queryable_state import FunctionNotFoundError, FunctionStateReader
from pulsar_state.functions.state_server import ROUTE_TEXT, FunctionStateServer
from pulsar_state.functions.worker_config import WorkerTopics

__all__ = ["functions_group", "serve"]


@click.group("functions", epilog=EXIT_CODES_EPILOG)
def functions_group() -> None:
    """Manage the functions `pulsar-state worker` runs; read what functions keep in the
    shared state."""


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
@group_options
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
    """A reader of functions' state on the cluster of the command's options; closed after.

    It finds a function of the ``--group`` of ``pulsar-state worker`` s (the default
    group unless given) by that group's records, after Pulsar's admin API."""
    try:
        group = WorkerTopics.of(cluster.pop("group"), cluster.pop("functions_namespace"))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    auth = cluster_auth(cluster)
    with cluster_client(cluster["service_url"], timeout, auth) as client:
        reader = FunctionStateReader(
            client=client,
            admin=admin_endpoint(cluster, auth),
            timeout_s=timeout,
            metadata_topics=(group.metadata,),
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
@group_options
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


# -- the functions of a group of workers ---------------------------------------------------


@contextlib.contextmanager
def _function_admin(cluster: dict[str, Any], timeout: float) -> Iterator[FunctionAdmin]:
    try:
        topics = WorkerTopics.of(cluster.pop("group"), cluster.pop("functions_namespace"))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    auth = cluster_auth(cluster)
    with cluster_client(cluster["service_url"], timeout, auth) as client:
        yield FunctionAdmin(client, topics, timeout_s=timeout, admin=admin_endpoint(cluster, auth))


def _function_options(fn: Any) -> Any:
    """The function: ``--tenant``/``--namespace``/``--name`` or ``--fqfn``."""
    for option in reversed(
        (
            click.option("--tenant", default="public", show_default=True, help="Its tenant."),
            click.option("--namespace", default="default", show_default=True, help="Namespace."),
            click.option("--name", help="The function's name."),
            click.option("--fqfn", help="The function as tenant/namespace/name."),
        )
    ):
        fn = option(fn)
    return fn


def _config_options(fn: Any) -> Any:
    """What a record holds, spelled as ``pulsar-admin functions create`` spells it."""
    for option in reversed(
        (
            click.option(
                "--py",
                help="The code: a .py file or a .zip, uploaded into the group's package "
                "store (at most 64 MiB); file://PATH (a filesystem every worker shares) "
                "or an http(s):// URL is recorded as given.",
            ),
            click.option("--classname", help="module.Class (or module.function) to run."),
            click.option("--inputs", help="Input topics, comma-separated."),
            click.option("--output", help="Output topic (what process returns goes there)."),
            click.option("--user-config", help="User config, a JSON object."),
            click.option(
                "--secrets",
                help="Secrets, a JSON object: name -> an environment variable of the "
                "workers holding the value (the value is never stored).",
            ),
            click.option("--parallelism", type=click.IntRange(min=1), help="Instances."),
            click.option(
                "--processing-guarantees",
                type=click.Choice(GUARANTEES),
                help="ATLEAST_ONCE by default.",
            ),
            click.option(
                "--retain-ordering/--no-retain-ordering",
                default=None,
                help="One active consumer per input partition, in order (failover).",
            ),
            click.option("--subs-name", help="Subscription name [default: tenant/ns/name]."),
            click.option(
                "--subs-position", type=click.Choice(POSITIONS), help="Latest by default."
            ),
        )
    ):
        fn = option(fn)
    return fn


def _config(opts: dict[str, Any]) -> dict[str, Any]:
    """The record config fields the options give (the others are left out)."""
    config: dict[str, Any] = {}
    if opts.get("user_config") is not None:
        try:
            config["userConfig"] = json.loads(opts["user_config"])
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--user-config") from exc
    if opts.get("secrets") is not None:
        try:
            config["secrets"] = json.loads(opts["secrets"])
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--secrets") from exc
    if opts.get("inputs") is not None:
        config["inputs"] = [t.strip() for t in opts["inputs"].split(",") if t.strip()]
    for option, key in (
        ("py", "py"),
        ("classname", "className"),
        ("output", "output"),
        ("parallelism", "parallelism"),
        ("processing_guarantees", "processingGuarantees"),
        ("retain_ordering", "retainOrdering"),
        ("subs_name", "subscriptionName"),
        ("subs_position", "subscriptionPosition"),
    ):
        if opts.get(option) is not None:
            config[key] = opts[option]
    return config


def _fqn(opts: dict[str, Any]) -> str:
    return "/".join(_function(opts["tenant"], opts["namespace"], opts["name"], opts["fqfn"]))


def _echo(value: Any, fmt: str) -> None:
    click.echo(json.dumps(value) if fmt == "json" else json.dumps(value, indent=2))


_CONFIG_KEYS = (
    "py",
    "classname",
    "inputs",
    "output",
    "user_config",
    "secrets",
    "parallelism",
    "processing_guarantees",
    "retain_ordering",
    "subs_name",
    "subs_position",
)


def _split_options(opts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the function and config options, the cluster options)."""
    mine = {
        k: opts.pop(k) for k in (*_CONFIG_KEYS, "tenant", "namespace", "name", "fqfn") if k in opts
    }
    return mine, opts


@functions_group.command()
@_function_options
@_config_options
@timeout_option
@group_options
@cluster_options
def create(*, timeout: float, **opts: Any) -> None:
    """Record a new function (version 0); the group's workers start its instances.
    (--output is the output topic here, as in pulsar-admin; `get` prints the record.)"""
    mine, cluster = _split_options(opts)
    fqn = _fqn(mine)
    with _function_admin(cluster, timeout) as admin:
        record = admin.create(fqn, _config(mine))
    click.echo(f"Created {fqn} (version {record['version']})")


@functions_group.command()
@_function_options
@_config_options
@click.option(
    "--expected-version",
    type=click.IntRange(min=0),
    help="Refuse unless this is the current version [default: the version read].",
)
@timeout_option
@group_options
@cluster_options
def update(*, expected_version: int | None, timeout: float, **opts: Any) -> None:
    """Change the options given of a function's record; its instances restart with it."""
    mine, cluster = _split_options(opts)
    fqn = _fqn(mine)
    with _function_admin(cluster, timeout) as admin:
        current = admin.get(fqn)
        if current is None:
            raise NotFoundExit(f"function {fqn} not found")
        version = current["version"] if expected_version is None else expected_version
        changes = _config(mine)
        config = dict(current["config"])
        if "py" in changes:  # new code: the old package goes with the old py
            config.pop("package", None)
        record = admin.update(fqn, {**config, **changes}, version)
    click.echo(f"Updated {fqn} (version {record['version']})")


@functions_group.command()
@_function_options
@click.option("--expected-version", type=click.IntRange(min=0), help="Only this version.")
@timeout_option
@group_options
@cluster_options
def delete(*, expected_version: int | None, timeout: float, **opts: Any) -> None:
    """Delete a function's record; the group's workers stop its instances."""
    mine, cluster = _split_options(opts)
    fqn = _fqn(mine)
    with _function_admin(cluster, timeout) as admin:
        if admin.get(fqn) is None:
            raise NotFoundExit(f"function {fqn} not found")
        admin.delete(fqn, expected_version)
    click.echo(f"Deleted {fqn}")


@functions_group.command()
@_function_options
@timeout_option
@output_option
@group_options
@cluster_options
def get(*, timeout: float, fmt: str, **opts: Any) -> None:
    """Print a function's record (its config and version)."""
    mine, cluster = _split_options(opts)
    fqn = _fqn(mine)
    with _function_admin(cluster, timeout) as admin:
        record = admin.get(fqn)
    if record is None:
        raise NotFoundExit(f"function {fqn} not found")
    _echo(record, fmt)


@functions_group.command("list")
@click.option("--tenant", default=None, help="Only this tenant's functions.")
@click.option("--namespace", default=None, help="Only this namespace's (with --tenant).")
@timeout_option
@output_option
@group_options
@cluster_options
def list_functions(
    *, tenant: str | None, namespace: str | None, timeout: float, fmt: str, **cluster: Any
) -> None:
    """Print the functions recorded, one fqn a line (--output json: a list)."""
    if namespace and not tenant:
        raise click.UsageError("--namespace needs --tenant")
    with _function_admin(cluster, timeout) as admin:
        names = admin.list_functions(tenant, namespace)
    if fmt == "json":
        click.echo(json.dumps(names))
    else:
        for name in names:
            click.echo(name)


@functions_group.command()
@_function_options
@timeout_option
@output_option
@group_options
@cluster_options
def status(*, timeout: float, fmt: str, **opts: Any) -> None:
    """Print each instance's status, as pulsar-admin's: numInstances, numRunning,
    instances (instanceId, status: running, workerId, numReceived,
    numSuccessfullyProcessed, numUserExceptions, latestUserExceptions, numRestarts...)."""
    mine, cluster = _split_options(opts)
    fqn = _fqn(mine)
    with _function_admin(cluster, timeout) as admin:
        record = admin.get(fqn)
        if record is None:
            raise NotFoundExit(f"function {fqn} not found")
        placements = admin.status(fqn)
    instances: list[dict[str, Any]] = [
        {"instanceId": int(p.instance.rpartition(":")[2]), "status": p.status()} for p in placements
    ]
    _echo(
        {
            "version": record["version"],
            "numInstances": record["config"]["parallelism"],
            "numRunning": sum(1 for i in instances if i["status"]["running"]),
            "instances": instances,
        },
        fmt,
    )
