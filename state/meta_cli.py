"""``pulsar-state meta get|put|ls|rm|watch --topic T``: a MetadataStore from the shell.

Values are printed as text when they are UTF-8, else as base64 (``--raw``
writes the bytes as they are). URLs: ``--service-url``/``--admin-url`` or
``PULSAR_SERVICE_URL``/``PULSAR_ADMIN_URL``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import sys
import threading
from collections.abc import Iterator

import click

from pulsar_state.cli_options import cluster_client, cluster_options
from pulsar_state.errors import BadVersionError, NotFoundError, PulsarStateError
from pulsar_state.metadata_state import Notification
from pulsar_state.metadata_store import MetadataStore

__all__ = ["meta_group"]


@contextlib.contextmanager
def _open_store(ctx: click.Context) -> Iterator[MetadataStore]:
    opts = ctx.obj
    with cluster_client(opts["service_url"]) as client:
        try:
            with MetadataStore(client, opts["topic"], admin_url=opts["admin_url"]) as store:
                yield store
        except (BadVersionError, NotFoundError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except PulsarStateError as exc:
            raise click.ClickException(str(exc)) from exc
        except ValueError as exc:
            raise click.ClickException(f"invalid input: {exc}") from exc


@click.group("meta")
@click.option("--topic", required=True, help="The metadata store's topic.")
@cluster_options
@click.pass_context
def meta_group(ctx: click.Context, topic: str, service_url: str, admin_url: str) -> None:
    """Read, change and watch a metadata store (PIP-45)."""
    ctx.obj = {"topic": topic, "service_url": service_url, "admin_url": admin_url}


def _show(value: bytes) -> str:
    try:
        return value.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode()


@meta_group.command()
@click.argument("path")
@click.option("--stat", is_flag=True, help="Print the Stat as JSON too.")
@click.pass_context
def get(ctx: click.Context, path: str, stat: bool) -> None:
    """Print PATH's value (latest); exit 1 if absent."""
    with _open_store(ctx) as store:
        found = store.get(path, latest=True).result(30)
        if found is None:
            click.echo(f"{path}: not found", err=True)
            sys.exit(1)
        click.echo(_show(found.value))
        if stat:
            s = found.stat
            click.echo(
                json.dumps(
                    {
                        "version": s.version,
                        "ctime": s.creation_timestamp,
                        "mtime": s.modification_timestamp,
                        "ephemeral": s.ephemeral,
                    }
                )
            )


@meta_group.command()
@click.argument("path")
@click.argument("value")
@click.option("--version", "expected", type=int, default=None, help="Expected version (-1: new).")
@click.pass_context
def put(ctx: click.Context, path: str, value: str, expected: int | None) -> None:
    """Set PATH to VALUE (text); print the new version."""
    with _open_store(ctx) as store:
        click.echo(store.put(path, value.encode(), expected).result(30).version)


@meta_group.command("ls")
@click.argument("path", default="/")
@click.pass_context
def list_children(ctx: click.Context, path: str) -> None:
    """List PATH's children."""
    with _open_store(ctx) as store:
        for child in store.get_children(path, latest=True).result(30):
            click.echo(child)


@meta_group.command("rm")
@click.argument("path")
@click.option("--version", "expected", type=int, default=None, help="Expected version.")
@click.pass_context
def remove(ctx: click.Context, path: str, expected: int | None) -> None:
    """Delete PATH."""
    with _open_store(ctx) as store:
        store.delete(path, expected).result(30)


@meta_group.command()
@click.option("--prefix", default="/", help="Only paths under this prefix.")
@click.option("--count", type=int, default=0, help="Stop after this many (0: until Ctrl-C).")
@click.pass_context
def watch(ctx: click.Context, prefix: str, count: int) -> None:
    """Print every change as it happens: TYPE PATH."""
    done = threading.Event()
    seen = [0]

    def show(note: Notification) -> None:
        if note.path.startswith(prefix):
            click.echo(f"{note.type.value} {note.path}")
            seen[0] += 1
            if count and seen[0] >= count:
                done.set()

    with _open_store(ctx) as store:
        store.register_listener(show)
        with contextlib.suppress(KeyboardInterrupt):
            done.wait()
