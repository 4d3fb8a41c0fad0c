"""``pulsar_state``: a PySpark (>= 4.2) Python Data Source over the shared state.

    spark.dataSource.register(PulsarStateDataSource)
    df = (spark.read.format("pulsar_state")
          .option("serviceUrl", "pulsar://127.0.0.1:6650")
          .option("adminUrl", "http://127.0.0.1:8080")
          .option("topic", "persistent://public/default/config")
          .load())                                   # key, value: the map, now

Modes (option ``mode``):

* ``snapshot`` (default): the latest value per key as of the topic's last
  position, frozen when the query is planned. Reads the compacted view plus
  the raw tail; tombstones, duplicates and stale (fenced) writes are dropped by
  the state core's own replay (:class:`~pulsar_state.replay.LogReplay`), so
  the result equals what a ``PulsarMap`` sees at that position.
* ``changelog``: every applied change (``change_type`` ``put``/``delete``) with
  its ``position`` (a token the core's ``read(at_least=...)`` takes), its
  parts ``ledger_id``, ``entry_id``, ``batch_index`` (order by them) and
  ``publish_time``, from the raw log.
* streaming (``spark.readStream.format("pulsar_state")``): micro-batches of
  changes; offsets are JSON ``{"position": "l:e:b", "epoch": n}`` so a batch
  replays deterministically. Read on the driver, or with ``numPartitions`` > 1
  as parallel ranges (:class:`PulsarStateParallelStreamReader`).
  ``trigger(availableNow=True)`` reads what the topic held when the query
  started, then stops.

Other options: ``valueFormat`` (``json``: the value as JSON text, validated;
``string``; ``binary``), ``includeMetadata`` (adds ``position`` and
``publish_time`` to snapshots), ``authToken`` (JWT), ``numPartitions`` (a
snapshot: split keys by hash across tasks, each task reads the topic; a
changelog: that many disjoint ranges of whole entries read in parallel, by
default one per driver core; see :func:`_replay_range` for why the rows equal
a one-range read's), ``timeoutMs``.
With ``pushdown=true``, filters ``key = x`` and ``key IN (...)`` are pushed down
(needs ``spark.sql.python.filterPushdown.enabled=true``, Spark >= 4.1, which
otherwise refuses such a reader): rows of other keys are never built.

Lifecycle (as PySpark's ``datasource.py`` describes it): the data source and
readers are created on the driver and pickled to executors; they hold only
options. Pulsar clients are opened inside ``partitions()`` (driver) and
``read()`` (executors) and closed there. The driver checks the options, that
the broker answers and that the topic exists before any task runs.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pulsar
import pyarrow as pa
import requests
from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    In,
    InputPartition,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from pulsar_state.admin import topic_path
from pulsar_state.position import START, Position
from pulsar_state.pulsar_map import MapOp, _MapCodec
from pulsar_state.replay import AppliedWrite, LogReplay
from pulsar_state.serde import BytesSerde, JsonSerde, Serde, StrKeySerde, StrSerde
from pulsar_state.topic_names import full_topic_name

__all__ = ["PulsarStateDataSource"]

_MODES = ("snapshot", "changelog")
_FORMATS: dict[str, Serde[Any]] = {
    "json": JsonSerde(),
    "string": StrSerde(),
    "binary": BytesSerde(),
}
_BATCH_ROWS = 50_000
_MAX_PARTITIONS = 10_000
#: a changelog range's warm-up: the entries before its start that its task
#: replays (no rows) so that its replay state (fencing epoch, recent write ids)
#: matches a whole-topic read's; at most this many entries and ~bytes
_WARMUP_ENTRIES = 64
_WARMUP_BYTES = 256 << 10


@dataclass(frozen=True)
class SourceOptions:
    """Validated options (picklable)."""

    service_url: str
    admin_url: str
    topic: str
    mode: str
    value_format: str
    include_metadata: bool
    auth_token: str | None
    #: None: the mode's default (snapshot 1, changelog the driver's cores)
    num_partitions: int | None
    timeout_ms: int
    pushdown: bool = False

    @classmethod
    def parse(cls, options: dict[str, str]) -> SourceOptions:
        opts = {k.lower(): v for k, v in options.items()}

        def need(name: str) -> str:
            value = opts.get(name.lower())
            if not value:
                raise ValueError(f"pulsar_state: option '{name}' is required")
            return value

        mode = opts.get("mode", "snapshot").lower()
        if mode not in _MODES:
            raise ValueError(f"pulsar_state: mode must be one of {_MODES}, got {mode!r}")
        value_format = opts.get("valueformat", "json").lower()
        if value_format not in _FORMATS:
            raise ValueError(
                f"pulsar_state: valueFormat must be one of {tuple(_FORMATS)}, got {value_format!r}"
            )
        partitions: int | None = None
        if opts.get("numpartitions") is not None:
            raw = opts["numpartitions"]
            try:
                partitions = int(raw)
            except ValueError:
                partitions = 0
            if not 1 <= partitions <= _MAX_PARTITIONS:
                raise ValueError(
                    f"pulsar_state: numPartitions must be an integer from 1 to "
                    f"{_MAX_PARTITIONS}, got {raw!r}"
                )
        try:
            timeout_ms = int(opts.get("timeoutms", "30000"))
        except ValueError:
            timeout_ms = 0
        if timeout_ms < 1:
            raise ValueError(
                f"pulsar_state: timeoutMs must be an integer >= 1, got {opts.get('timeoutms')!r}"
            )
        include = opts.get("includemetadata", "false").lower()
        pushdown = opts.get("pushdown", "false").lower()
        for flag, value in (("includeMetadata", include), ("pushdown", pushdown)):
            if value not in ("true", "false"):
                raise ValueError(f"pulsar_state: {flag} is true or false, got {value!r}")
        topic = full_topic_name(need("topic"))  # InvalidTopicNameError is a clear message too
        service_url = need("serviceUrl")
        if not service_url.startswith(("pulsar://", "pulsar+ssl://")):
            raise ValueError(f"pulsar_state: serviceUrl must be pulsar://..., got {service_url!r}")
        admin_url = need("adminUrl").rstrip("/")
        if not admin_url.startswith(("http://", "https://")):
            raise ValueError(f"pulsar_state: adminUrl must be http(s)://..., got {admin_url!r}")
        return cls(
            service_url=service_url,
            admin_url=admin_url,
            topic=topic,
            mode=mode,
            value_format=value_format,
            include_metadata=include == "true",
            auth_token=opts.get("authtoken") or None,
            num_partitions=partitions,
            timeout_ms=timeout_ms,
            pushdown=pushdown == "true",
        )

    # -- helpers used where the code runs -----------------------------------------

    def client(self) -> pulsar.Client:
        auth = pulsar.AuthenticationToken(self.auth_token) if self.auth_token else None
        return pulsar.Client(
            self.service_url,
            authentication=auth,
            operation_timeout_seconds=max(1, self.timeout_ms // 1000),
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )

    def partitions_for(self, mode: str) -> int:
        if self.num_partitions is not None:
            return self.num_partitions
        return max(1, os.cpu_count() or 1) if mode == "changelog" else 1

    def check_topic(self) -> None:
        """On the driver: the broker answers and the topic exists, or a clear error."""
        self._admin_get("stats")

    def internal_stats(self) -> dict[str, Any]:
        """The topic's managed-ledger stats (its ledgers and their entry counts)."""
        stats: dict[str, Any] = self._admin_get("internalStats").json()
        return stats

    def _admin_get(self, what: str) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.auth_token}"} if self.auth_token else {}
        url = f"{self.admin_url}/admin/v2/{topic_path(self.topic)}/{what}"
        try:
            resp = requests.get(url, headers=headers, timeout=self.timeout_ms / 1000)
        except requests.RequestException as exc:
            raise ConnectionError(
                f"pulsar_state: the Pulsar admin API at {self.admin_url} is unreachable ({exc})"
            ) from None
        if resp.status_code == 404:
            raise ValueError(f"pulsar_state: topic {self.topic} does not exist")
        if resp.status_code in (401, 403):
            raise PermissionError(f"pulsar_state: not allowed to read {self.topic}")
        if resp.status_code != 200:
            detail = f"{resp.status_code}: {resp.text[:200]}"
            raise ConnectionError(f"pulsar_state: checking {self.topic} failed ({detail})")
        return resp

    def last_position(self) -> Position:
        """The topic's last message id (a short-lived subscription asks the broker)."""
        client = self.client()
        try:
            consumer = client.subscribe(
                self.topic,
                f"pss-spark-{uuid.uuid4().hex[:12]}",
                receiver_queue_size=0,
                properties={"pulsar-state-role": "spark-planner"},
            )
            try:
                return Position.from_message_id(consumer.get_last_message_id())
            finally:
                consumer.unsubscribe()
        except pulsar.PulsarException as exc:
            raise ConnectionError(f"pulsar_state: cannot reach {self.service_url}: {exc}") from None
        finally:
            client.close()

    def codec(self) -> _MapCodec[str, Any]:
        return _MapCodec(StrKeySerde(), _FORMATS[self.value_format])

    def value_type(self) -> str:
        return "binary" if self.value_format == "binary" else "string"

    def value_of(self, payload: bytes) -> Any:
        return payload if self.value_format == "binary" else payload.decode()


def _schema(opts: SourceOptions) -> str:
    value = opts.value_type()
    if opts.mode == "changelog":
        return (
            f"key string, value {value}, change_type string, position string, "
            "publish_time timestamp, ledger_id long, entry_id long, batch_index int"
        )
    extra = ", position string, publish_time timestamp" if opts.include_metadata else ""
    return f"key string, value {value}{extra}"


def _replay_changes(
    opts: SourceOptions,
    *,
    compacted: bool,
    start: Position | None,
    start_epoch: int,
    end: Position,
    on_write: Any,
) -> LogReplay[dict[str, Any], MapOp[str, Any]]:
    """Feed the topic from ``start`` (exclusive) through ``end`` into a LogReplay."""
    replay: LogReplay[dict[str, Any], MapOp[str, Any]] = LogReplay(
        topic=opts.topic,
        codec=opts.codec(),
        applier=lambda state, op: None,
        state={},
        start=start,
        start_epoch=start_epoch,
    )
    replay.add_listener(on_write)
    if end.is_start or (start is not None and start.covers(end)):
        return replay
    client = opts.client()
    try:
        first = (
            pulsar.MessageId(-1, start.ledger, start.entry, start.batch)
            if start is not None and not start.is_start
            else pulsar.MessageId.earliest
        )
        reader = client.create_reader(opts.topic, first, is_read_compacted=compacted)
        try:
            while True:
                if replay.feed(reader.read_next(timeout_millis=opts.timeout_ms)).covers(end):
                    break
            replay.flush()
        finally:
            reader.close()
    except pulsar.Timeout:
        raise TimeoutError(
            f"pulsar_state: no message within {opts.timeout_ms} ms before reaching {end}"
        ) from None
    finally:
        client.close()
    return replay


def _to_arrow(
    opts: SourceOptions, schema: StructType, columns: dict[str, list[Any]]
) -> pa.RecordBatch:
    fields = []
    arrays = []
    for field in schema.fields:
        name = field.name
        if name == "publish_time":
            arr = pa.array(columns[name], type=pa.timestamp("us", tz="UTC"))
        elif name in ("ledger_id", "entry_id"):
            arr = pa.array(columns[name], type=pa.int64())
        elif name == "batch_index":
            arr = pa.array(columns[name], type=pa.int32())
        elif name == "value" and opts.value_format == "binary":
            arr = pa.array(columns[name], type=pa.binary())
        else:
            arr = pa.array(columns[name], type=pa.string())
        fields.append(pa.field(name, arr.type, nullable=True))
        arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


Entry = tuple[int, int]  # (ledger, entry)


@dataclass(frozen=True)
class _Range:
    """A task's share of the log: whole entries ``first``..``last``.

    ``begin`` (<= ``first``) is where its replay starts, with fencing epoch
    ``seed``: the entries before ``first`` are its warm-up, replayed without rows.
    ``shadow``/``shadow_seed``: the next range's ``begin`` and ``seed``, so that
    this task can check the next one's warm-up (see :func:`_replay_range`);
    ``expect_epoch``: the last range checks the epoch a stream's end offset carries.
    """

    first: Entry
    last: Entry
    begin: Entry
    shadow: Entry | None
    end: str  # the read's last position (the last range stops there)
    is_last: bool
    seed: int = 0
    shadow_seed: int = 0
    expect_epoch: int | None = None


def _segments(
    opts: SourceOptions, start: Position, end: Position
) -> list[tuple[int, int, int, float]]:
    """The entries after ``start``'s entry through ``end``'s, per ledger:
    (ledger id, first entry, entries, bytes per entry), from admin internal stats."""
    segments: list[tuple[int, int, int, float]] = []
    if end.is_start:
        return segments
    stats = opts.internal_stats()
    last_ledger, _, _ = str(stats.get("lastConfirmedEntry", "-1:-1")).partition(":")
    for ledger in stats.get("ledgers", []):
        lid, entries = int(ledger["ledgerId"]), int(ledger.get("entries", 0))
        size = float(ledger.get("size", 0))
        if str(lid) == last_ledger:  # the open ledger: its counts are on the topic
            entries = int(stats.get("currentLedgerEntries", entries))
            size = float(stats.get("currentLedgerSize", size))
        per_entry = size / entries if size > 0 and entries > 0 else 1.0
        if lid > end.ledger or (not start.is_start and lid < start.ledger):
            continue
        if lid == end.ledger:
            entries = end.entry + 1  # the frozen end is in this ledger
        first = start.entry + 1 if not start.is_start and lid == start.ledger else 0
        if entries - first > 0:
            segments.append((lid, first, entries - first, per_entry))
    return segments


def _plan_ranges(
    opts: SourceOptions,
    end: Position,
    count: int,
    *,
    start: Position = START,
    start_epoch: int = 0,
    end_epoch: int | None = None,
) -> list[_Range]:
    """Split the log after ``start`` (whose entry was read whole) through ``end``
    into at most ``count`` ranges of whole entries. ``end_epoch``: a stream's end
    offset's epoch, which the last range checks."""
    segments = _segments(opts, start, end)
    if not segments or segments[-1][0] != end.ledger:
        # nothing new, or stats that do not show the end: one range from the start
        first = (start.ledger, start.entry + 1) if not start.is_start else (-1, -1)
        last = (end.ledger, end.entry)
        return [_Range(first, last, first, None, str(end), True, start_epoch, 0, end_epoch)]
    total = sum(entries for _, _, entries, _ in segments)
    count = max(1, min(count, total))

    def at(index: int) -> tuple[Entry, float]:
        for lid, first_entry, entries, per_entry in segments:
            if index < entries:
                return (lid, first_entry + index), per_entry
            index -= entries
        raise IndexError(index)

    starts = [i * total // count for i in range(count)]
    begins: list[int] = []
    for i, first_index in enumerate(starts):
        begin = first_index
        if i > 0:  # a warm-up: the entries just before (never before the last one's)
            spent = 0.0
            while (
                begin > begins[-1]
                and first_index - begin < _WARMUP_ENTRIES
                and (spent < _WARMUP_BYTES or begin == first_index)
            ):
                begin -= 1
                spent += at(begin)[1]
        begins.append(begin)
    # a replay from the first new entry starts with the start's epoch (exact)
    seeds = [start_epoch if begin == 0 else 0 for begin in begins]
    ranges = []
    for i, first_index in enumerate(starts):
        last_index = starts[i + 1] - 1 if i + 1 < count else total - 1
        is_last = i + 1 == count
        ranges.append(
            _Range(
                first=at(first_index)[0],
                last=at(last_index)[0],
                begin=at(begins[i])[0],
                shadow=None if is_last else at(begins[i + 1])[0],
                end=str(end),
                is_last=is_last,
                seed=seeds[i],
                shadow_seed=0 if is_last else seeds[i + 1],
                expect_epoch=end_epoch if is_last else None,
            )
        )
    return ranges


def _new_replay(
    opts: SourceOptions, start_epoch: int
) -> LogReplay[dict[str, Any], MapOp[str, Any]]:
    return LogReplay(
        topic=opts.topic,
        codec=opts.codec(),
        applier=lambda state, op: None,
        state={},
        start_epoch=start_epoch,
    )


def _replay_range(opts: SourceOptions, rng: _Range, *, on_write: Any) -> int:
    """Replay ``rng`` (its warm-up first, without rows) and hand its writes to ``on_write``.

    Exactness: the rows of a range are the writes the whole-topic replay applies
    there, provided this replay's state at ``first`` equals that replay's. Both
    replays see the same messages from ``begin`` on; what the warm-up cannot see
    is older history, which matters through (1) the fencing epoch, and (2) the
    recent write ids that make a re-landed write a duplicate. (1) is checked:
    the previous range's task, which replays through this range's start, runs a
    shadow of this warm-up and fails the read if their epochs differ. (2) is
    covered for a duplicate landing within the warm-up's entries of its original.
    """
    replay = _new_replay(opts, rng.seed)
    first = rng.first

    def in_range(change: AppliedWrite[MapOp[str, Any]]) -> None:
        if (change.position.ledger, change.position.entry) >= first:
            on_write(change)

    replay.add_listener(in_range)
    shadow = _new_replay(opts, rng.shadow_seed) if rng.shadow is not None else None
    end = Position.parse(rng.end)
    if end.is_start or (rng.first > rng.last):
        return replay.epoch
    client = opts.client()
    try:
        begin = (
            pulsar.MessageId(-1, rng.begin[0], rng.begin[1], -1)
            if rng.begin[0] >= 0
            else pulsar.MessageId.earliest
        )
        reader = client.create_reader(opts.topic, begin, start_message_id_inclusive=True)
        try:
            while True:
                msg = reader.read_next(timeout_millis=opts.timeout_ms)
                pos = Position.from_message_id(msg.message_id())
                entry = (pos.ledger, pos.entry)
                if entry > rng.last:
                    break  # the next range's first message
                replay.feed(msg)
                if shadow is not None and rng.shadow is not None and entry >= rng.shadow:
                    shadow.feed(msg)
                if rng.is_last and pos.covers(end):
                    break
            replay.flush()
        finally:
            reader.close()
    except pulsar.Timeout:
        raise TimeoutError(
            f"pulsar_state: no message within {opts.timeout_ms} ms before reaching {rng.last}"
        ) from None
    finally:
        client.close()
    if shadow is not None:
        shadow.flush()
        if shadow.epoch != replay.epoch:
            raise RuntimeError(
                f"pulsar_state: a parallel changelog read cannot be made exact here: the "
                f"fencing epoch at {rng.last[0]}:{rng.last[1]} ({replay.epoch}) is older "
                f"than the next range's warm-up shows ({shadow.epoch}) (stale writes of a "
                f"fenced writer fill it); read this topic with numPartitions=1"
            )
    if rng.expect_epoch is not None and rng.expect_epoch != replay.epoch:
        raise RuntimeError(
            f"pulsar_state: a parallel stream batch cannot be made exact here: the fencing "
            f"epoch at {rng.end} ({replay.epoch}) is not the one its end offset carries "
            f"({rng.expect_epoch}) (stale writes of a fenced writer fill the entries before "
            f"it); read this stream with numPartitions=1"
        )
    return replay.epoch


class _Partition(InputPartition):
    def __init__(
        self,
        index: int,
        count: int,
        end: str,
        keys: tuple[str, ...] | None,
        span: _Range | None = None,
    ) -> None:
        super().__init__(index)
        self.index = index
        self.count = count
        self.end = end
        self.keys = keys
        #: changelog: the log range this partition reads (keys are not split then)
        self.span = span


def _bucket(key: str, count: int) -> int:
    return zlib.crc32(key.encode()) % count


class PulsarStateBatchReader(DataSourceReader):
    """Snapshot or changelog of one state topic. Holds only options (picklable)."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.keys: tuple[str, ...] | None = None
        opts.check_topic()  # on the driver, before any task

    def partitions(self) -> list[InputPartition]:
        end = self.opts.last_position()  # frozen at planning time
        n = self.opts.partitions_for(self.opts.mode)
        if self.opts.mode == "changelog":  # disjoint position ranges, keys not split
            ranges = _plan_ranges(self.opts, end, n)
            return [_Partition(i, 1, str(end), self.keys, span) for i, span in enumerate(ranges)]
        return [_Partition(i, n, str(end), self.keys) for i in range(n)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Partition)
        opts = self.opts
        keys = set(partition.keys) if partition.keys is not None else None

        def wanted(key: str) -> bool:
            if keys is not None and key not in keys:
                return False
            return partition.count == 1 or _bucket(key, partition.count) == partition.index

        names = [f.name for f in self.schema.fields]
        if opts.mode == "changelog":
            assert partition.span is not None
            yield from _changelog_batches(opts, self.schema, partition.span, wanted)
            return

        latest: dict[str, tuple[bytes, Position, int] | None] = {}

        def on_write(change: AppliedWrite[MapOp[str, Any]]) -> None:
            for op in change.ops:
                if wanted(op.key):
                    latest[op.key] = (
                        None if op.is_delete else (op.payload, change.position, change.publish_ms)
                    )

        _replay_changes(
            opts,
            compacted=True,
            start=None,
            start_epoch=0,
            end=Position.parse(partition.end),
            on_write=on_write,
        )
        columns: dict[str, list[Any]] = {name: [] for name in names}
        for key, entry in latest.items():
            if entry is None:
                continue  # deleted
            payload, position, publish_ms = entry
            columns["key"].append(key)
            columns["value"].append(opts.value_of(payload))
            if opts.include_metadata:
                columns["position"].append(str(position))
                columns["publish_time"].append(publish_ms * 1000)
        yield from _chunks(opts, self.schema, columns)


class PulsarStatePushdownReader(PulsarStateBatchReader):
    """The batch reader with key filters pushed down (option ``pushdown=true``).

    Spark refuses a reader that implements ``pushFilters`` unless
    ``spark.sql.python.filterPushdown.enabled=true``, hence a reader of its own.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 (Spark's name)
        for f in filters:
            if isinstance(f, EqualTo) and f.attribute == ("key",):
                self.keys = (
                    (str(f.value),)
                    if self.keys is None
                    else tuple(k for k in self.keys if k == str(f.value))
                )
            elif isinstance(f, In) and f.attribute == ("key",):
                wanted = tuple(str(v) for v in f.value)
                self.keys = (
                    wanted if self.keys is None else tuple(k for k in self.keys if k in wanted)
                )
            else:
                yield f


def _chunks(
    opts: SourceOptions, schema: StructType, columns: dict[str, list[Any]]
) -> Iterator[pa.RecordBatch]:
    total = len(columns["key"])
    for start in range(0, total, _BATCH_ROWS):
        part = {name: values[start : start + _BATCH_ROWS] for name, values in columns.items()}
        yield _to_arrow(opts, schema, part)


class PulsarStateStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of changes. Runs on the driver (a state topic is small).

    With ``Trigger.AvailableNow`` the topic's last position when the query
    starts is the target: no batch reads past it, so writes made while the
    query runs wait for the next query.
    """

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._target: Position | None = None
        opts.check_topic()

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's name)
        return {"position": str(START), "epoch": 0}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark's name)
        self._target = self.opts.last_position()

    def read(self, start: dict[str, Any]) -> tuple[Iterator[tuple[Any, ...]], dict[str, Any]]:
        end = self.opts.last_position()
        if self._target is not None:
            end = min(end, self._target)
        rows, epoch = self._changes(start, end)
        return iter(rows), {
            "position": str(max(end, Position.parse(start["position"]))),
            "epoch": epoch,
        }

    def readBetweenOffsets(  # noqa: N802 (Spark's name)
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Iterator[tuple[Any, ...]]:
        rows, epoch = self._changes(start, Position.parse(end["position"]))
        if "epoch" in end and int(end["epoch"]) != epoch:
            # only a parallel batch's end offset can carry an epoch other than the
            # replay's (inferred on the driver, refused by its last task): going on
            # from it would start the next batch from a wrong epoch
            raise RuntimeError(
                f"pulsar_state: the stream's end offset {end} carries fencing epoch "
                f"{end['epoch']}, but the log has {epoch} there (inferred by a parallel "
                f"batch from a fenced writer's stale writes); run the query on a new "
                f"checkpoint without numPartitions"
            )
        return iter(rows)

    def _changes(self, start: dict[str, Any], end: Position) -> tuple[list[tuple[Any, ...]], int]:
        opts = self.opts
        rows: list[tuple[Any, ...]] = []

        def on_change(change: AppliedWrite[MapOp[str, Any]]) -> None:
            for op in change.ops:
                rows.append(
                    (
                        op.key,
                        None if op.is_delete else opts.value_of(op.payload),
                        "delete" if op.is_delete else "put",
                        str(change.position),
                        _utc(change.publish_ms),
                        change.position.ledger,
                        change.position.entry,
                        change.position.batch,
                    )
                )

        begin = Position.parse(start["position"])
        replay = _replay_changes(
            opts,
            compacted=False,
            start=None if begin.is_start else begin,
            start_epoch=int(start.get("epoch", 0)),
            end=end,
            on_write=on_change,
        )
        return rows, replay.epoch

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: readers are opened and closed per batch."""


def _changelog_batches(
    opts: SourceOptions, schema: StructType, span: _Range, wanted: Any = None
) -> Iterator[pa.RecordBatch]:
    """The changelog rows of one range, as Arrow batches."""
    columns: dict[str, list[Any]] = {f.name: [] for f in schema.fields}

    def on_change(change: AppliedWrite[MapOp[str, Any]]) -> None:
        for op in change.ops:
            if wanted is not None and not wanted(op.key):
                continue
            columns["key"].append(op.key)
            columns["value"].append(None if op.is_delete else opts.value_of(op.payload))
            columns["change_type"].append("delete" if op.is_delete else "put")
            columns["position"].append(str(change.position))
            columns["publish_time"].append(change.publish_ms * 1000)
            columns["ledger_id"].append(change.position.ledger)
            columns["entry_id"].append(change.position.entry)
            columns["batch_index"].append(change.position.batch)

    _replay_range(opts, span, on_write=on_change)
    yield from _chunks(opts, schema, columns)


def _end_epoch(opts: SourceOptions, start: Position, start_epoch: int, end: Position) -> int:
    """The fencing epoch at ``end`` of a stream batch from ``start``, from a warm-up
    of the entries before ``end`` (seeded with ``start_epoch`` if it reaches back to
    the batch's first entry); the batch's last task checks it against its replay."""
    segments = _segments(opts, start, end)
    if not segments or segments[-1][0] != end.ledger:  # replay the batch (exact)
        replay = _replay_changes(
            opts,
            compacted=False,
            start=None if start.is_start else start,
            start_epoch=start_epoch,
            end=end,
            on_write=lambda change: None,
        )
        return replay.epoch
    total = sum(entries for _, _, entries, _ in segments)
    taken, spent = 0, 0.0
    begin: Entry = (end.ledger, end.entry)
    for lid, first_entry, entries, per_entry in reversed(segments):
        for entry in range(first_entry + entries - 1, first_entry - 1, -1):
            if taken >= _WARMUP_ENTRIES or (spent >= _WARMUP_BYTES and taken > 0):
                break
            begin, taken, spent = (lid, entry), taken + 1, spent + per_entry
    seed = start_epoch if taken == total else 0
    last: Entry = (end.ledger, end.entry)
    warmup = _Range(begin, last, begin, None, str(end), True, seed)
    return _replay_range(opts, warmup, on_write=lambda change: None)


class PulsarStateParallelStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of changes read as disjoint ranges by ``numPartitions`` tasks.

    Used when ``numPartitions`` > 1 is set on a stream; otherwise the stream is
    read on the driver (:class:`PulsarStateStreamReader`). An end offset carries
    the fencing epoch at its position, worked out on the driver from the entries
    just before it and checked by the batch's last task against its replay.
    """

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._target: Position | None = None
        self._last: dict[str, Any] | None = None
        opts.check_topic()

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's name)
        return {"position": str(START), "epoch": 0}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark's name)
        self._target = self.opts.last_position()

    def latestOffset(  # noqa: N802 (Spark's name)
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        start = start or self._last or self.initialOffset()
        begin = Position.parse(start["position"])
        end = self.opts.last_position()
        if self._target is not None:
            end = min(end, self._target)
        if not end > begin or begin.covers(end):
            return start
        epoch = _end_epoch(self.opts, begin, int(start.get("epoch", 0)), end)
        self._last = {"position": str(end), "epoch": epoch}
        return self._last

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, stop = Position.parse(start["position"]), Position.parse(end["position"])
        if not stop > begin or begin.covers(stop):
            return []
        ranges = _plan_ranges(
            self.opts,
            stop,
            self.opts.partitions_for("changelog"),
            start=begin,
            start_epoch=int(start.get("epoch", 0)),
            end_epoch=int(end["epoch"]),
        )
        return [_Partition(i, 1, str(stop), None, span) for i, span in enumerate(ranges)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Partition) and partition.span is not None
        yield from _changelog_batches(self.opts, self.schema, partition.span)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: readers are opened and closed per task."""


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


class PulsarStateDataSource(DataSource):
    """Register with ``spark.dataSource.register(PulsarStateDataSource)``."""

    @classmethod
    def name(cls) -> str:
        return "pulsar_state"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.opts = SourceOptions.parse(dict(options))

    def schema(self) -> str:
        return _schema(self.opts)

    def reader(self, schema: StructType) -> PulsarStateBatchReader:
        if self.opts.pushdown:
            return PulsarStatePushdownReader(self.opts, schema)
        return PulsarStateBatchReader(self.opts, schema)

    def streamReader(self, schema: StructType) -> PulsarStateParallelStreamReader:  # noqa: N802
        """Ranges read in parallel when ``numPartitions`` > 1 is set; else Spark
        falls back to :meth:`simpleStreamReader` (the stream read on the driver)."""
        if self.opts.num_partitions is None or self.opts.num_partitions == 1:
            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"}
            )
        self._check_stream_mode()
        return PulsarStateParallelStreamReader(self.opts, schema)

    def _check_stream_mode(self) -> None:
        if self.opts.mode != "changelog":
            raise ValueError(
                "pulsar_state: a stream reads changes: set option mode=changelog "
                "(the stream's schema is the changelog's)"
            )

    def simpleStreamReader(self, schema: StructType) -> PulsarStateStreamReader:  # noqa: N802
        self._check_stream_mode()
        return PulsarStateStreamReader(self.opts, schema)
