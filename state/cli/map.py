"""``pulsar-state map``: a PulsarMap from the shell.

``map --topic T get|put|delete|ls|dump`` read or change one map;
``map watch T``, ``map load T FILE`` and ``map diff A B`` name their topics as
arguments.

Values are JSON on the command line and in the output. URLs come from
``--service-url``/``--admin-url`` or ``PULSAR_SERVICE_URL``/``PULSAR_ADMIN_URL``,
a JWT from ``--auth-token`` or ``PULSAR_AUTH_TOKEN``.

``get``, ``ls``, ``dump``, ``watch`` and ``diff`` are read-only (a
:class:`~pulsar_state.core.log.view.TopicView` or a non-durable Reader of the raw
log): they create no topic, set no policy, open no producer, so a role with
only the consume permission can run them; a missing topic is exit code 3.
``put``, ``delete`` and ``load`` open a :class:`PulsarMap`, which creates and
protects the topic. Exit codes (:mod:`.exit_codes`): 0 ok, 1 error (bad
file, failed write; ``diff``: the sides differ), 2 usage (bad option, key,
position, timeout or topic name), 3 not found (no such topic; ``get``: no such
key). ``get`` and ``ls`` print JSON with ``--output json``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TextIO

import click
from tqdm import tqdm

from pulsar_state.cli.exit_codes import ERROR, EXIT_CODES_EPILOG, NotFoundExit
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
from pulsar_state.core.log.format import check_user_key, check_value_key
from pulsar_state.core.log.replay import AppliedWrite
from pulsar_state.core.log.view import TopicView
from pulsar_state.core.write.entry_sender import entry_size
from pulsar_state.map.op import MapCodec, MapOp, apply_map_op
from pulsar_state.map.pulsar_map import PulsarMap
from pulsar_state.map.watch import ChangeTracker, LogFeed, MapChange, key_matcher
from pulsar_state.position import Position
from pulsar_state.serde import JsonSerde, StrKeySerde

__all__ = ["map_group"]


def _group_topic(ctx: click.Context) -> str:
    """``map --topic``, which get, put, delete, ls and dump need."""
    topic: str | None = ctx.obj["topic"]
    if topic is None:
        raise click.UsageError(f"Missing option '--topic' (map --topic T {ctx.info_name} ...).")
    return topic


@contextlib.contextmanager
def _open_map(ctx: click.Context, topic: str | None = None) -> Iterator[PulsarMap[str, Any]]:
    """The map, for writing (creates and protects the topic)."""
    opts = ctx.obj
    auth = cluster_auth(opts)
    with (
        cluster_client(opts["service_url"], opts["timeout"], auth) as client,
        PulsarMap[str, Any](
            client,
            topic or _group_topic(ctx),
            admin=admin_endpoint(opts, auth),
            config=StateConfig(operation_timeout_s=opts["timeout"]),
        ) as m,
    ):
        yield m


def _read_map(ctx: click.Context, topic: str | None = None) -> dict[str, Any]:
    """The map's latest content, read-only (see the module docstring)."""
    view: TopicView[dict[str, Any], MapOp[str, Any]]
    # a big map takes a while to replay: count its messages on a terminal
    with (
        read_only_view(
            {**ctx.obj, "topic": topic or _group_topic(ctx)},
            timeout_s=ctx.obj["timeout"],
            codec=MapCodec(StrKeySerde(), JsonSerde()),
            initializer=dict,
            applier=apply_map_op,
        ) as view,
        tqdm(unit="msgs", file=sys.stderr, disable=not sys.stderr.isatty(), leave=False) as bar,
    ):
        bar.set_description(f"reading {view.topic}")
        return view.catch_up(on_progress=lambda n: bar.update(n - bar.n))


def _user_key(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        return check_user_key(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _value_key(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        return check_value_key(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _optional_topic(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else topic_callback(ctx, param, value)


@click.group("map", epilog=EXIT_CODES_EPILOG)
@click.option(
    "--topic",
    callback=_optional_topic,
    help="The map's topic (persistent://t/ns/name or name), for get, put, delete, ls, dump.",
)
@cluster_options
@timeout_option
@click.pass_context
def map_group(ctx: click.Context, /, **options: Any) -> None:
    """Read and change a PulsarMap.

    get, ls, dump, watch and diff only read: no topic is created and nothing
    is changed.
    """
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
@output_option
@click.pass_context
def get(ctx: click.Context, key: str, fmt: str) -> None:
    """Print KEY's value (latest) as JSON; exit 3 if KEY or the topic is missing.

    --output json: {"key": KEY, "value": VALUE}."""
    entries = _read_map(ctx)
    if key not in entries:
        raise NotFoundExit(f"{key}: not found")
    if fmt == "json":
        click.echo(json.dumps({"key": key, "value": entries[key]}))
    else:
        click.echo(json.dumps(entries[key]))


@map_group.command()
@click.argument("key", callback=_value_key)
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
@output_option
@click.pass_context
def list_keys(ctx: click.Context, fmt: str) -> None:
    """List the keys (latest), sorted, one a line (--output json: a JSON list); exit 3
    if no such topic."""
    keys = sorted(_read_map(ctx))
    if fmt == "json":
        click.echo(json.dumps(keys))
        return
    for key in keys:
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


# -- watch, load, diff ---------------------------------------------------------

_CODEC: MapCodec[str, Any] = MapCodec(StrKeySerde(), JsonSerde())


def _topic_argument(ctx: click.Context, param: click.Parameter, value: str) -> str:
    result = topic_callback(ctx, param, value)
    return result


def _position(value: str, what: str) -> Position:
    try:
        return Position.parse(value)
    except ValueError as exc:
        raise click.BadParameter(f"{exc} (a position looks like 12:3:-1)", param_hint=what) from exc


@contextlib.contextmanager
def _log_feed(ctx: click.Context, topic: str, on_write: Any) -> Iterator[LogFeed[str, Any]]:
    """A read-only replay of ``topic``'s raw log; exit code 3 if there is no such topic."""
    opts = ctx.obj
    auth = cluster_auth(opts)
    with cluster_client(opts["service_url"], opts["timeout"], auth) as client:
        admin = admin_endpoint(opts, auth).admin(
            timeout_s=min(10.0, opts["timeout"]), retry_s=opts["timeout"]
        )
        try:
            admin.require_topic(topic)
        finally:
            admin.close()
        feed: LogFeed[str, Any] = LogFeed(client, topic, _CODEC, on_write)
        try:
            yield feed
        finally:
            feed.close()


def _show_change(change: MapChange[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(
            {
                "position": str(change.position),
                "key": change.key,
                "op": "delete" if change.deleted else "put",
                "value": change.value,
                "old_value": change.old_value,
            }
        )
    was = "" if change.old_value is None else f" (was {json.dumps(change.old_value)})"
    if change.deleted:
        return f"{change.position} {change.key} deleted{was}"
    return f"{change.position} {change.key} = {json.dumps(change.value)}{was}"


@map_group.command()
@click.argument("topic", callback=_topic_argument)
@click.option("--prefix", default=None, help="Only keys starting with this.")
@click.option(
    "--key",
    "key",
    default=None,
    callback=lambda c, p, v: _user_key(c, p, v) if v else v,
    help="Only this key.",
)
@click.option(
    "--from",
    "from_position",
    default=None,
    help="Print the changes after this position (a write's token, e.g. 12:3:-1); "
    "default: from now.",
)
@click.option("--count", type=click.IntRange(min=1), default=None, help="Stop after N changes.")
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Stop after S seconds.",
)
@output_option
@click.pass_context
def watch(
    ctx: click.Context,
    /,
    *,
    topic: str,
    prefix: str | None,
    key: str | None,
    from_position: str | None,
    count: int | None,
    duration: float | None,
    fmt: str,
) -> None:
    """Print every change of TOPIC's keys, in order, as it happens (until Ctrl-C,
    --count or --duration). Text: POSITION KEY = VALUE (was OLD), or
    POSITION KEY deleted (was OLD). Exit 3 if no such topic."""
    if prefix is not None and key is not None:
        raise click.UsageError("give --prefix or --key, not both")
    start = None if from_position is None else _position(from_position, "--from")
    match = key_matcher(
        StrKeySerde(), prefix if prefix is not None else key, prefix=prefix is not None
    )
    tracker: ChangeTracker[str, Any] = ChangeTracker(JsonSerde(), match)
    pending: list[AppliedWrite[Any]] = []
    shown = 0
    deadline = None if duration is None else time.monotonic() + duration
    with _log_feed(ctx, topic, pending.append) as feed:
        feed.read_to_end(ctx.obj["timeout"] * 4)  # the history: old values, and "now"
        after = feed.applied if start is None else start
        click.echo(f"watching {topic} after {after}", err=True)
        try:
            while True:
                writes, pending[:] = list(pending), []
                for write in writes:
                    for change in tracker.changes(write.ops, write.position):
                        if change.position <= after:
                            continue
                        click.echo(_show_change(change, fmt))
                        shown += 1
                        if count is not None and shown >= count:
                            return
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                feed.poll(0.2 if left is None else min(0.2, left))
        except KeyboardInterrupt:
            return


def _read_lines(file: TextIO) -> dict[str, Any]:
    """What ``dump`` writes, checked whole before anything is written."""
    name = getattr(file, "name", "-")
    entries: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for number, line in enumerate(file, 1):
        if not line.strip():
            continue
        where = f"{name} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise click.ClickException(f"{where}: not JSON ({exc.msg})") from exc
        if not isinstance(record, dict) or set(record) != {"key", "value"}:
            raise click.ClickException(
                f'{where}: expected {{"key": ..., "value": ...}} as map dump writes'
            )
        key = record["key"]
        try:
            check_value_key(key)
        except (TypeError, ValueError) as exc:
            raise click.ClickException(f"{where}: {exc}") from exc
        if key in entries:
            raise click.ClickException(f"{where}: key {key!r} again (first on line {lines[key]})")
        entries[key], lines[key] = record["value"], number
    return entries


def _batches(ops: list[MapOp[str, Any]], config: StateConfig) -> Iterator[list[MapOp[str, Any]]]:
    """``ops`` in writes within the op-count and entry-size limits."""
    batch: list[MapOp[str, Any]] = []
    size = 0
    serde: JsonSerde[Any] = JsonSerde()
    for op in ops:
        payload = b"" if op.is_delete else serde.serialize(op.value)
        op_size = entry_size([(op.key, payload)])
        if batch and (
            len(batch) >= config.max_ops_per_write or size + op_size > config.max_write_bytes // 2
        ):
            yield batch
            batch, size = [], 0
        batch.append(op)
        size += op_size
    if batch:
        yield batch


def _constant(ops: list[MapOp[str, Any]]) -> Callable[[Mapping[str, Any]], list[MapOp[str, Any]]]:
    return lambda _state: ops


@map_group.command()
@click.argument("topic", callback=_topic_argument)
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--replace", is_flag=True, help="Also delete the keys FILE does not have.")
@click.pass_context
def load(ctx: click.Context, topic: str, file: TextIO, replace: bool) -> None:
    """Write the entries of FILE (JSON lines {"key": ..., "value": ...}, as map dump
    writes them; - for stdin) into TOPIC. The file is checked whole first: a bad line
    writes nothing (exit 1). One atomic write when it fits the write limits, else
    several. With --replace, TOPIC ends equal to FILE."""
    entries = _read_lines(file)
    config = StateConfig(operation_timeout_s=ctx.obj["timeout"])
    with _open_map(ctx, topic) as m:
        deleted: list[str] = []
        if replace:
            present = m.list_keys(latest=True).result(ctx.obj["timeout"])
            deleted = sorted(k for k in present if k not in entries)
        ops = [MapOp.delete(k) for k in deleted] + [MapOp.put(k, v) for k, v in entries.items()]
        batches = list(_batches(ops, config))
        if len(batches) > 1:
            click.echo(f"{len(ops)} ops exceed one write: {len(batches)} writes", err=True)
        for batch in tqdm(batches, disable=len(batches) < 10, unit="writes", file=sys.stderr):
            m.transact(_constant(batch)).result(ctx.obj["timeout"] * 2)
        click.echo(f"{len(entries)} entries written to {topic}, {len(deleted)} deleted")


def _state_of(ctx: click.Context, spec: str) -> tuple[str, dict[str, Any]]:
    """``TOPIC`` (latest) or ``TOPIC@POSITION`` (as it was at that write)."""
    name, _, at = spec.partition("@")
    try:
        topic = topic_callback(ctx, click.Argument(["topic"]), name)
    except click.BadParameter as exc:
        raise click.BadParameter(str(exc.message), param_hint=spec) from exc
    if not at:
        return topic, _read_map(ctx, topic)
    target = _position(at, spec)
    state: dict[str, Any] = {}

    def on_write(write: AppliedWrite[Any]) -> None:
        if target.covers(write.position):
            for op in write.ops:
                apply_map_op(state, op)

    with _log_feed(ctx, topic, on_write) as feed:
        try:
            feed.read_until(target, ctx.obj["timeout"] * 4)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    return topic, state


def _differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for key in sorted(a.keys() | b.keys()):
        if key not in b:
            yield {"key": key, "change": "removed", "a": a[key]}
        elif key not in a:
            yield {"key": key, "change": "added", "b": b[key]}
        elif a[key] != b[key]:
            yield {"key": key, "change": "changed", "a": a[key], "b": b[key]}


@map_group.command()
@click.argument("a")
@click.argument("b")
@output_option
@click.pass_context
def diff(ctx: click.Context, a: str, b: str, fmt: str) -> None:
    """What changes from A to B: two topics, or one topic at two positions
    (TOPIC@POSITION: the map right after the write at that position; a bare
    TOPIC is its latest state). Text: - KEY: A (only in A), + KEY: B (only in B),
    ~ KEY: A -> B, then "N differences". Exit 0 if equal, 1 if they differ (as
    diff does), 3 if a topic is missing."""
    _, left = _state_of(ctx, a)
    _, right = _state_of(ctx, b)
    found = 0
    for d in _differences(left, right):
        found += 1
        if fmt == "json":
            click.echo(json.dumps(d))
        elif d["change"] == "removed":
            click.echo(f"- {d['key']}: {json.dumps(d['a'])}")
        elif d["change"] == "added":
            click.echo(f"+ {d['key']}: {json.dumps(d['b'])}")
        else:
            click.echo(f"~ {d['key']}: {json.dumps(d['a'])} -> {json.dumps(d['b'])}")
    if fmt == "text":
        click.echo(f"{found} differences")
    if found:
        ctx.exit(ERROR)
