"""``pulsar-state map get|put|delete|ls|dump --topic T``: a PulsarMap from the shell.

Values are JSON on the command line and in the output. URLs come from
``--service-url``/``--admin-url`` or ``PULSAR_SERVICE_URL``/``PULSAR_ADMIN_URL``.
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

from pulsar_state.cli_options import cluster_client, cluster_options
from pulsar_state.config import StateConfig
from pulsar_state.errors import PulsarStateError
from pulsar_state.pulsar_map import PulsarMap

__all__ = ["map_group"]


@contextlib.contextmanager
def _open_map(ctx: click.Context) -> Iterator[PulsarMap[str, Any]]:
    opts = ctx.obj
    with cluster_client(opts["service_url"], opts["timeout"]) as client:
        try:
            with PulsarMap[str, Any](
                client,
                opts["topic"],
                admin_url=opts["admin_url"],
                config=StateConfig(operation_timeout_s=opts["timeout"]),
            ) as m:
                yield m
        except PulsarStateError as exc:
            raise click.ClickException(str(exc)) from exc
        except pulsar.PulsarException as exc:
            raise click.ClickException(f"Pulsar error: {exc}") from exc
        except (ValueError, TypeError) as exc:  # a key or value the map refuses
            raise click.ClickException(f"invalid input: {exc}") from exc


@click.group("map")
@click.option("--topic", required=True, help="The map's topic (persistent://t/ns/name or name).")
@cluster_options
@click.option("--timeout", default=30.0, show_default=True, help="Seconds per operation.")
@click.pass_context
def map_group(
    ctx: click.Context, topic: str, service_url: str, admin_url: str, timeout: float
) -> None:
    """Read and change a PulsarMap."""
    ctx.obj = {
        "topic": topic,
        "service_url": service_url,
        "admin_url": admin_url,
        "timeout": timeout,
    }


def _parse(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"not JSON: {value!r} ({exc.msg}); quote strings: '\"text\"'"
        ) from exc


@map_group.command()
@click.argument("key")
@click.pass_context
def get(ctx: click.Context, key: str) -> None:
    """Print KEY's value (latest) as JSON; exit 1 if absent."""
    with _open_map(ctx) as m:
        found = m.contains(key, latest=True).result(ctx.obj["timeout"])
        if not found:
            click.echo(f"{key}: not found", err=True)
            sys.exit(1)
        click.echo(json.dumps(m.get(key).result()))


@map_group.command()
@click.argument("key")
@click.argument("value")
@click.pass_context
def put(ctx: click.Context, key: str, value: str) -> None:
    """Set KEY to the JSON VALUE; print the write's position."""
    parsed = _parse(value)
    with _open_map(ctx) as m:
        click.echo(str(m.put(key, parsed).result(ctx.obj["timeout"])))


@map_group.command()
@click.argument("key")
@click.pass_context
def delete(ctx: click.Context, key: str) -> None:
    """Delete KEY; print the value it had."""
    with _open_map(ctx) as m:
        click.echo(json.dumps(m.delete(key).result(ctx.obj["timeout"])))


@map_group.command("ls")
@click.pass_context
def list_keys(ctx: click.Context) -> None:
    """List the keys (latest), sorted."""
    with _open_map(ctx) as m:
        for key in sorted(m.list_keys(latest=True).result(ctx.obj["timeout"])):
            click.echo(key)


@map_group.command()
@click.option("--output", "-o", type=click.File("w"), default="-", help="File (default stdout).")
@click.pass_context
def dump(ctx: click.Context, output: Any) -> None:
    """Write every entry as a JSON line {"key": ..., "value": ...}."""
    with _open_map(ctx) as m:
        entries = m.items(latest=True).result(ctx.obj["timeout"])
        show = output is not sys.stdout and len(entries) > 1000
        for key, value in tqdm(
            sorted(entries.items()), disable=not show, unit="keys", file=sys.stderr
        ):
            output.write(json.dumps({"key": key, "value": value}) + "\n")
