"""``pulsar-state meta get|put|ls|rm|watch|lock|elect --topic T``: a MetadataStore from the shell.

``lock PATH [-- COMMAND ...]`` and ``elect PATH [PROPOSAL]`` are etcdctl's: take
a lock (waiting, ``--wait S`` at most) and run a command holding it, or
campaign and lead until stopped.

``put --sequential`` creates PATH + the next number of its parent's counter and
prints the created path; ``rm --recursive`` (also spelled ``delete``) deletes a
subtree in one write and prints the deleted paths. ``get --stat`` prints the
Stat as JSON, the owner session and fencing token included.

Values are printed as text when they are UTF-8, else as base64 (``--raw``
writes the bytes as they are). URLs: ``--service-url``/``--admin-url`` or
``PULSAR_SERVICE_URL``/``PULSAR_ADMIN_URL``; a JWT: ``--auth-token`` or
``PULSAR_AUTH_TOKEN``.

``get``, ``ls`` and ``watch`` are read-only (a :class:`~pulsar_state.core.log.view.TopicView`):
no topic, session or policy is created or changed, so a role with only the
consume permission can run them; a missing topic is exit code 3. They show
the tree as written: an ephemeral node whose owner died stays until a live
store removes it. ``put`` and ``rm`` open a :class:`MetadataStore`.

``--timeout`` (seconds each operation may take, 30 by default) and the exit
codes are those of every command (:mod:`.exit_codes`): a missing topic or
path is 3, a stale ``--version`` 1. ``get`` and ``ls`` print JSON with
``--output json``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
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
    read_only_view,
    timeout_option,
    topic_callback,
)
from pulsar_state.config import StateConfig
from pulsar_state.coordination.lock import LockEvent
from pulsar_state.coordination.service import CoordinationService
from pulsar_state.core.log.view import TopicView
from pulsar_state.errors import OperationTimeoutError
from pulsar_state.metadata.store import MetadataStore, _MetaCodec
from pulsar_state.metadata.tree import (
    MetadataTree,
    MetaOp,
    Notification,
    validate_path,
    validate_sequential_prefix,
    validate_subtree,
)

__all__ = ["meta_group"]


@contextlib.contextmanager
def _open_store(ctx: click.Context) -> Iterator[MetadataStore]:
    """The store, for writing (creates and protects the topic, opens a session)."""
    opts = ctx.obj
    auth = cluster_auth(opts)
    with (
        cluster_client(opts["service_url"], opts["timeout"], auth) as client,
        MetadataStore(
            client,
            opts["topic"],
            admin=admin_endpoint(opts, auth),
            config=StateConfig(operation_timeout_s=opts["timeout"]),
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
        timeout_s=ctx.obj["timeout"],
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


@click.group("meta", epilog=EXIT_CODES_EPILOG)
@click.option("--topic", required=True, callback=topic_callback, help="The metadata store's topic.")
@cluster_options
@timeout_option
@click.pass_context
def meta_group(ctx: click.Context, /, **options: Any) -> None:
    """Read, change and watch a metadata store (PIP-45).

    get, ls and watch only read: no topic is created and nothing is changed.
    """
    # topic, service_url, admin_url, the auth options, timeout
    ctx.obj = options


def _show(value: bytes) -> str:
    try:
        return value.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode()


@meta_group.command()
@click.argument("path", callback=_path)
@click.option("--stat", is_flag=True, help="Print the Stat as JSON too.")
@output_option
@click.pass_context
def get(ctx: click.Context, path: str, stat: bool, fmt: str) -> None:
    """Print PATH's value (latest); exit 3 if PATH or the topic is missing.

    --output json: {"path": PATH, "value": VALUE, "stat": {...}} (the value as
    text, or "base64:..."), the Stat always included."""
    with _view(ctx, []) as view:
        found = view.state.get(path)
    if found is None:
        raise NotFoundExit(f"{path}: not found")
    s = found.stat
    shown_stat = {
        "version": s.version,
        "ctime": s.creation_timestamp,
        "mtime": s.modification_timestamp,
        "ephemeral": s.ephemeral,
        "owner": s.owner,
        "token": s.token,
    }
    if fmt == "json":
        click.echo(json.dumps({"path": path, "value": _show(found.value), "stat": shown_stat}))
        return
    click.echo(_show(found.value))
    if stat:
        click.echo(json.dumps(shown_stat))


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
        stat = store.put(path, value.encode(), expected, sequential=sequential).result(
            ctx.obj["timeout"]
        )
        click.echo(stat.path if sequential else stat.version)


@meta_group.command("ls")
@click.argument("path", default="/", callback=_path)
@output_option
@click.pass_context
def list_children(ctx: click.Context, path: str, fmt: str) -> None:
    """List PATH's children (latest), one a line (--output json: a JSON list); exit 3 if
    no such topic."""
    with _view(ctx, []) as view:
        children = view.state.children(path)
    if fmt == "json":
        click.echo(json.dumps(list(children)))
        return
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
            store.delete(path, expected).result(ctx.obj["timeout"])
            return
        for deleted in sorted(store.delete_recursive(path).result(ctx.obj["timeout"])):
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


def _holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@meta_group.command("lock", context_settings={"ignore_unknown_options": True})
@click.argument("path", callback=_path)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds to wait for the lock (default: until taken).",
)
@click.option("--content", default=None, help="What the lock node holds (default: host:pid).")
@click.pass_context
def lock_command(
    ctx: click.Context, path: str, command: tuple[str, ...], wait: float | None, content: str | None
) -> None:
    """Take the lock at PATH (waiting while another holds it), as etcdctl lock does.

    With a COMMAND (after --), run it while holding the lock, with
    PULSAR_STATE_LOCK_PATH and PULSAR_STATE_LOCK_TOKEN (the fencing token) in its
    environment, then release the lock and exit with the command's exit code;
    if the lock is lost meanwhile (the session expired), the command is
    terminated and the exit code is 1. Without a COMMAND, print PATH and the
    token and hold the lock until Ctrl-C or SIGTERM.
    """
    with _open_store(ctx) as store:
        service = CoordinationService[str](store)
        try:
            held = service.lock(path, content or _holder_name(), timeout_s=wait)
        except OperationTimeoutError:
            raise click.ClickException(f"the lock {path} was not taken within {wait}s") from None
        lost = threading.Event()
        held.add_listener(
            lambda event: lost.set() if event in (LockEvent.LOST, LockEvent.SESSION_LOST) else None
        )
        with held:
            click.echo(f"{path} {held.fencing_token}", err=bool(command))
            code = _run_holding(command, path, held.fencing_token, lost)
        service.close()
    if code:
        ctx.exit(code)


def _run_holding(command: tuple[str, ...], path: str, token: int, lost: threading.Event) -> int:
    """Run ``command`` (or wait, without one) until it ends, SIGTERM or Ctrl-C, or
    the lock is lost; the exit code."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    child = None
    try:
        if command:
            env = {
                **os.environ,
                "PULSAR_STATE_LOCK_PATH": path,
                "PULSAR_STATE_LOCK_TOKEN": str(token),
            }
            child = subprocess.Popen(list(command), env=env)
        while not stop.is_set():
            if lost.is_set():
                click.echo(f"Error: lost the lock {path}", err=True)
                return 1
            if child is not None and child.poll() is not None:
                return child.returncode
            stop.wait(0.2)
        return 0 if child is None else 130
    except KeyboardInterrupt:
        return 0 if child is None else 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        if child is not None and child.poll() is None:
            child.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(10)


@meta_group.command("elect")
@click.argument("path", callback=_path)
@click.argument("proposal", required=False)
@click.pass_context
def elect_command(ctx: click.Context, path: str, proposal: str | None) -> None:
    """Campaign for leadership at PATH, as etcdctl elect does: once elected,
    print PROPOSAL (default: host:pid) and lead until Ctrl-C or SIGTERM (then
    resign); exit 1 if the leadership is lost meanwhile."""
    with _open_store(ctx) as store:
        service = CoordinationService[str](store)
        mine = proposal or _holder_name()
        elected = service.become_leader(path, mine)
        try:
            leadership = elected.result()
        except KeyboardInterrupt:
            elected.cancel()
            service.close()
            return
        lost = threading.Event()
        leadership.add_listener(
            lambda event: lost.set() if event in (LockEvent.LOST, LockEvent.SESSION_LOST) else None
        )
        with leadership:
            click.echo(mine)
            code = _run_holding((), path, leadership.fencing_token, lost)
        service.close()
    if code:
        ctx.exit(code)
