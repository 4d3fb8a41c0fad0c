"""``pulsar-state meta get|put|ls|rm|watch --topic T``: a MetadataStore from the shell.

``put --sequential`` creates PATH + the next number of its parent's counter and
prints the created path; ``rm --recursive`` (also spelled ``delete``) deletes a
subtree in one write and prints the deleted paths. ``get --stat`` prints the
Stat as JSON, the owner session and fencing token included.

Values are printed as text when they are UTF-8, else as base64 (``--raw``
writes the bytes as they are). URLs: ``--service-url``/``--admin-url`` or
``PULSAR_SERVICE_URL``/``PULSAR_ADMIN_URL``; a JWT: ``--auth-token`` or
``PULSAR_AUTH_TOKEN``.

``get``, ``ls`` and ``watch`` are read-only (a :class:`~pulsar_state.topic_view.TopicView`):
no topic, session or policy is created or changed, so a role with only the
consume permission can run them; a missing topic is exit code 3. They show
the tree as written: an ephemeral node whose owner died stays until a live
store removes it. ``put`` and ``rm`` open a :class:`MetadataStore`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import click
import pulsar

from pulsar_state.cli_options import (
    TopicMissingError,
    cluster_auth,
    cluster_client,
    cluster_options,
    read_only_view,
    topic_callback,
)
from pulsar_state.errors import (
    BadVersionError,
    NotFoundError,
    PulsarStateError,
    TopicNotFoundError,
)
from pulsar_state.metadata_state import (
    MetadataTree,
    MetaOp,
    Notification,
    validate_path,
    validate_sequential_prefix,
    validate_subtree,
)
from pulsar_state.metadata_store import MetadataStore, _MetaCodec
from pulsar_state.topic_view import TopicView

__all__ = ["meta_group"]


_TIMEOUT_S = 30.0


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """The library's errors as CLI errors: a message, no traceback."""
    try:
        yield
    except (BadVersionError, NotFoundError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except TopicNotFoundError as exc:
        raise TopicMissingError(str(exc)) from exc
    except PulsarStateError as exc:
        raise click.ClickException(str(exc)) from exc
    except pulsar.PulsarException as exc:
        raise click.ClickException(f"Pulsar error: {exc}") from exc
    except ValueError as exc:
        raise click.ClickException(f"invalid input: {exc}") from exc


@contextlib.contextmanager
def _open_store(ctx: click.Context) -> Iterator[MetadataStore]:
    """The store, for writing (creates and protects the topic, opens a session)."""
    opts = ctx.obj
    with (
        cluster_client(opts["service_url"], _TIMEOUT_S, cluster_auth(opts)) as client,
        _errors(),
        MetadataStore(
            client,
            opts["topic"],
            admin_url=opts["admin_url"],
            admin_headers=cluster_auth(opts).admin_headers(),
        ) as store,
    ):
        yield store


@contextlib.contextmanager
def _view(
    ctx: click.Context, notes: list[Notification]
) -> Iterator[TopicView[MetadataTree, MetaOp]]:
    """A read-only view of the tree, caught up; each applied op's notifications
    are appended to ``notes``."""

    def apply(tree: MetadataTree, op: MetaOp) -> None:
        notes.extend(tree.apply(op))

    with read_only_view(
        ctx.obj,
        timeout_s=_TIMEOUT_S,
        errors=_errors,
        codec=_MetaCodec(),
        initializer=MetadataTree,
        applier=apply,
    ) as view:
        view.catch_up()
        yield view


def _path(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        return validate_path(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


@click.group("meta")
@click.option("--topic", required=True, callback=topic_callback, help="The metadata store's topic.")
@cluster_options
@click.pass_context
def meta_group(ctx: click.Context, /, **options: Any) -> None:
    """Read, change and watch a metadata store (PIP-45).

    get, ls and watch only read: no topic is created and nothing is changed.
    """
    # topic, service_url, admin_url, the auth options
    ctx.obj = options


def _show(value: bytes) -> str:
    try:
        return value.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode()


@meta_group.command()
@click.argument("path", callback=_path)
@click.option("--stat", is_flag=True, help="Print the Stat as JSON too.")
@click.pass_context
def get(ctx: click.Context, path: str, stat: bool) -> None:
    """Print PATH's value (latest); exit 1 if absent, 3 if no such topic."""
    with _view(ctx, []) as view:
        found = view.state.get(path)
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
                    "owner": s.owner,
                    "token": s.token,
                }
            )
        )


@meta_group.command()
@click.argument("path")
@click.argument("value")
@click.option("--version", "expected", type=int, default=None, help="Expected version (-1: new).")
@click.option(
    "--sequential",
    is_flag=True,
    help="PATH is a name prefix: create PATH + the next number; print the created path.",
)
@click.pass_context
def put(ctx: click.Context, path: str, value: str, expected: int | None, sequential: bool) -> None:
    """Set PATH to VALUE (text); print the new version (the path with --sequential)."""
    try:
        validate_sequential_prefix(path) if sequential else validate_path(path)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="PATH") from exc
    if sequential and expected not in (None, -1):
        raise click.BadParameter(
            f"a sequential put always creates: -1 or none, got {expected}", param_hint="--version"
        )
    with _open_store(ctx) as store:
        stat = store.put(path, value.encode(), expected, sequential=sequential).result(_TIMEOUT_S)
        click.echo(stat.path if sequential else stat.version)


@meta_group.command("ls")
@click.argument("path", default="/", callback=_path)
@click.pass_context
def list_children(ctx: click.Context, path: str) -> None:
    """List PATH's children (latest); exit 3 if no such topic."""
    with _view(ctx, []) as view:
        children = view.state.children(path)
    for child in children:
        click.echo(child)


@meta_group.command("rm")
@click.argument("path", callback=_path)
@click.option("--version", "expected", type=int, default=None, help="Expected version.")
@click.option(
    "--recursive",
    "-r",
    is_flag=True,
    help="Delete PATH and everything below it (one write); print the deleted paths.",
)
@click.pass_context
def remove(ctx: click.Context, path: str, expected: int | None, recursive: bool) -> None:
    """Delete PATH (also spelled ``delete``)."""
    if recursive:
        if expected is not None:
            raise click.BadParameter("not with --recursive", param_hint="--version")
        try:
            validate_subtree(path)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="PATH") from exc
    with _open_store(ctx) as store:
        if not recursive:
            store.delete(path, expected).result(_TIMEOUT_S)
            return
        for deleted in sorted(store.delete_recursive(path).result(_TIMEOUT_S)):
            click.echo(deleted)


meta_group.add_command(remove, "delete")


@meta_group.command()
@click.option("--prefix", default="/", help="Only paths under this prefix.")
@click.option("--count", type=int, default=0, help="Stop after this many (0: until Ctrl-C).")
@click.pass_context
def watch(ctx: click.Context, prefix: str, count: int) -> None:
    """Print every change from now on as it happens: TYPE PATH; exit 3 if no such topic."""
    if count < 0:
        raise click.BadParameter(f"must be >= 0, got {count}", param_hint="--count")
    notes: list[Notification] = []
    seen = 0
    with _view(ctx, notes) as view, contextlib.suppress(KeyboardInterrupt):
        notes.clear()  # the history read while catching up is not news
        click.echo(f"watching {view.topic} under {prefix} (Ctrl-C stops)", err=True)
        for _ in view.follow():
            news, notes[:] = list(notes), []
            for note in news:
                if not note.path.startswith(prefix):
                    continue
                click.echo(f"{note.type.value} {note.path}")
                seen += 1
                if count and seen >= count:
                    return
