"""``pulsar-state map get|put|delete|ls|dump --topic T``: a PulsarMap from the shell.

Values are JSON on the command line and in the output. URLs come from
``--service-url``/``--admin-url`` or ``PULSAR_SERVICE_URL``/``PULSAR_ADMIN_URL``,
a JWT from ``--auth-token`` or ``PULSAR_AUTH_TOKEN``.

``get``, ``ls`` and ``dump`` are read-only (a :class:`~pulsar_state.topic_view.TopicView`):
they create no topic, set no policy, open no producer, so a role with only
the consume permission can run them; a missing topic is exit code 3. ``put``
and ``delete`` open a :class:`PulsarMap`, which creates and protects the topic.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import click
import pulsar
from tqdm import tqdm

from pulsar_state.cli_options import (
    TopicMissingError,
    cluster_auth,
    cluster_client,
    cluster_options,
    read_only_view,
    topic_callback,
)
from pulsar_state.config import StateConfig
from pulsar_state.errors import PulsarStateError, TopicNotFoundError
from pulsar_state.pulsar_map import MapOp, PulsarMap, _apply, _MapCodec
from pulsar_state.serde import JsonSerde, StrKeySerde
from pulsar_state.topic_format import check_user_key
from pulsar_state.topic_view import TopicView

__all__ = ["map_group"]


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """The library's errors as CLI errors: a message, no traceback."""
    try:
        yield
    except TopicNotFoundError as exc:
        raise TopicMissingError(str(exc)) from exc
    except PulsarStateError as exc:
        raise click.ClickException(str(exc)) from exc
    except pulsar.PulsarException as exc:
        raise click.ClickException(f"Pulsar error: {exc}") from exc
    except (ValueError, TypeError) as exc:  # a key or value the map refuses
        raise click.ClickException(f"invalid input: {exc}") from exc


@contextlib.contextmanager
def _open_map(ctx: click.Context) -> Iterator[PulsarMap[str, Any]]:
    """The map, for writing (creates and protects the topic)."""
    opts = ctx.obj
    with (
        cluster_client(opts["service_url"], opts["timeout"], cluster_auth(opts)) as client,
        _errors(),
        PulsarMap[str, Any](
            client,
            opts["topic"],
            admin_url=opts["admin_url"],
            admin_headers=cluster_auth(opts).admin_headers(),
            config=StateConfig(operation_timeout_s=opts["timeout"]),
        ) as m,
    ):
        yield m


def _read_map(ctx: click.Context) -> dict[str, Any]:
    """The map's latest content, read-only (see the module docstring)."""
    view: TopicView[dict[str, Any], MapOp[str, Any]]
    with read_only_view(
        ctx.obj,
        timeout_s=ctx.obj["timeout"],
        errors=_errors,
        codec=_MapCodec(StrKeySerde(), JsonSerde()),
        initializer=dict,
        applier=_apply,
    ) as view:
        return view.catch_up()


def _user_key(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        return check_user_key(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


@click.group("map")
@click.option(
    "--topic",
    required=True,
    callback=topic_callback,
    help="The map's topic (persistent://t/ns/name or name).",
)
@cluster_options
@click.option("--timeout", default=30.0, show_default=True, help="Seconds per operation.")
@click.pass_context
def map_group(ctx: click.Context, /, **options: Any) -> None:
    """Read and change a PulsarMap.

    get, ls and dump only read: no topic is created and nothing is changed.
    """
    if options["timeout"] <= 0:
        raise click.BadParameter(f"must be > 0, got {options['timeout']}", param_hint="--timeout")
    # topic, service_url, admin_url, the auth options, timeout
    ctx.obj = options


def _parse(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"not JSON: {value!r} ({exc.msg}); quote strings: '\"text\"'"
        ) from exc


@map_group.command()
@click.argument("key", callback=_user_key)
@click.pass_context
def get(ctx: click.Context, key: str) -> None:
    """Print KEY's value (latest) as JSON; exit 1 if absent, 3 if no such topic."""
    entries = _read_map(ctx)
    if key not in entries:
        click.echo(f"{key}: not found", err=True)
        sys.exit(1)
    click.echo(json.dumps(entries[key]))


@map_group.command()
@click.argument("key", callback=_user_key)
@click.argument("value")
@click.pass_context
def put(ctx: click.Context, key: str, value: str) -> None:
    """Set KEY to the JSON VALUE; print the write's position."""
    parsed = _parse(value)
    with _open_map(ctx) as m:
        click.echo(str(m.put(key, parsed).result(ctx.obj["timeout"])))


@map_group.command()
@click.argument("key", callback=_user_key)
@click.pass_context
def delete(ctx: click.Context, key: str) -> None:
    """Delete KEY; print the value it had."""
    with _open_map(ctx) as m:
        click.echo(json.dumps(m.delete(key).result(ctx.obj["timeout"])))


@map_group.command("ls")
@click.pass_context
def list_keys(ctx: click.Context) -> None:
    """List the keys (latest), sorted; exit 3 if no such topic."""
    for key in sorted(_read_map(ctx)):
        click.echo(key)


@map_group.command()
@click.option("--output", "-o", type=click.File("w"), default="-", help="File (default stdout).")
@click.pass_context
def dump(ctx: click.Context, output: Any) -> None:
    """Write every entry as a JSON line {"key": ..., "value": ...}; exit 3 if no such topic."""
    entries = _read_map(ctx)
    show = output is not sys.stdout and len(entries) > 1000
    for key, value in tqdm(sorted(entries.items()), disable=not show, unit="keys", file=sys.stderr):
        output.write(json.dumps({"key": key, "value": value}) + "\n")
