"""``make bench-sink``: the SQL sink runner's write path into PostgreSQL, in one run.

The same records (distinct keys, JSON values of about 100 bytes) go into a
fresh table of one PostgreSQL server three ways, alternating in each round:

1. **ours, batched**: the runner's write path (``Records.handle_batch`` of
   :mod:`pulsar_state.connectors.sink_records`: the in-order gate, the poison
   check, one transaction a batch with the redelivery and takeover-gap checks,
   every row and the position) in batches of ``--batch`` records, as the
   runner hands them over with ``batchMaxRecords``;
2. **plain executemany**: psycopg's ``executemany`` of the same rows, with the
   same ``INSERT ... ON CONFLICT DO UPDATE``, in one transaction of
   ``--batch`` rows each, and nothing else (goal: ours >= 0.7x);
3. **one record a transaction**: ``SqlUpsertSink.write`` for each record, the
   write path before batches (and still ``SinkFunction``'s).

Records are handed over in memory: no broker, so that the three compare the
database writes alone. p50 and p99 are per batch (per record for 3).

PostgreSQL: ``PULSAR_STATE_BENCH_POSTGRES_URL`` (a database the bench may create
tables in), else the tests' private server (``tests/postgres_server.py``:
Debian's binaries, ``initdb`` under ``.cache/postgres/bench``, ``fsync=off``).
Results: ``bench/results/sink.md`` and ``sink.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid

import psycopg

from bench.common import REPO, Comparison, percentile, write_report
from pulsar_state.connectors.dead_letter import DeadLetters
from pulsar_state.connectors.sink import SinkRecord, SqlUpsertSink
from pulsar_state.connectors.sink_health import SinkHealth
from pulsar_state.connectors.sink_records import Records
from pulsar_state.position import Position

sys.path.insert(0, str(REPO / "tests"))
from postgres_server import start_server

ENV_URL = "PULSAR_STATE_BENCH_POSTGRES_URL"

UPSERT = (
    "INSERT INTO {table} (key, value, position) VALUES (%s, %s, %s) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value, position = excluded.position"
)


def _records(n: int, topic: str) -> list[SinkRecord]:
    return [
        SinkRecord(
            topic=topic,
            key=f"key-{i:08d}",
            value=json.dumps({"order": i, "customer": f"c{i % 977}", "total": i * 1.25}).encode(),
            position=Position(1, i, -1),
        )
        for i in range(n)
    ]


def _sink(database: str, table: str) -> SqlUpsertSink:
    sink = SqlUpsertSink()
    sink.open({"database": database, "table": table})
    return sink


def _fresh(database: str, table: str) -> None:
    with psycopg.connect(database, autocommit=True) as db:
        db.execute(f"TRUNCATE {table}")


def _ours(database: str, records: list[SinkRecord], batch: int) -> tuple[float, list[float]]:
    sink = _sink(database, "bench_batched")
    handler = Records(sink, DeadLetters(None, None), stop=threading.Event(), health=SinkHealth())
    latencies = []
    try:
        start = time.perf_counter()
        for at in range(0, len(records), batch):
            began = time.perf_counter()
            outcomes = handler.handle_batch([(r, None) for r in records[at : at + batch]])
            latencies.append(time.perf_counter() - began)
            assert set(outcomes) == {"written"}, set(outcomes)
        return time.perf_counter() - start, latencies
    finally:
        handler.close()
        sink.close()


def _executemany(database: str, records: list[SinkRecord], batch: int) -> tuple[float, list[float]]:
    rows = [(r.key, r.value.decode(), str(r.position)) for r in records]
    sql = UPSERT.format(table="bench_plain")
    latencies = []
    with psycopg.connect(database, autocommit=True) as db, db.cursor() as cur:
        start = time.perf_counter()
        for at in range(0, len(rows), batch):
            began = time.perf_counter()
            with db.transaction():
                cur.executemany(sql, rows[at : at + batch])
            latencies.append(time.perf_counter() - began)
        return time.perf_counter() - start, latencies


def _one_per_transaction(database: str, records: list[SinkRecord]) -> tuple[float, list[float]]:
    sink = _sink(database, "bench_single")
    latencies = []
    try:
        start = time.perf_counter()
        for record in records:
            began = time.perf_counter()
            assert sink.write(record)
            latencies.append(time.perf_counter() - began)
        return time.perf_counter() - start, latencies
    finally:
        sink.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500, help="records a transaction")
    parser.add_argument(
        "--single-records", type=int, default=3000, help="records of the one-a-transaction run"
    )
    args = parser.parse_args()

    server = None
    database = os.environ.get(ENV_URL)
    if not database:
        server = start_server("bench")
        database = server.create_database()
    try:
        for table in ("bench_batched", "bench_single"):
            _sink(database, table).close()  # the sink's own tables
        with psycopg.connect(database, autocommit=True) as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS bench_plain "
                "(key TEXT PRIMARY KEY, value TEXT NOT NULL, position TEXT NOT NULL)"
            )
        comparisons = _run(database, args)
    finally:
        if server is not None:
            server.stop()
    preamble = __doc__.split("\n", 2)[2].rsplit("PostgreSQL:", 1)[0] + (
        f"Each round writes {args.records:,} records batched and with executemany "
        f"({args.batch} a transaction) and {args.single_records:,} one a transaction, "
        f"each into a truncated table; {args.rounds} rounds after a warm-up round. "
        "PostgreSQL is the tests' private server (fsync=off, on the same 2-core "
        "machine as the bench) unless `PULSAR_STATE_BENCH_POSTGRES_URL` names another; "
        "with fsync on, each commit costs more, and one record a transaction the most."
    )
    path = write_report("sink", "SQL sink runner into PostgreSQL", comparisons, preamble)
    print(path.read_text())


def _run(database: str, args: argparse.Namespace) -> list[Comparison]:
    vs_plain = Comparison(
        "batched write path vs executemany",
        "records/s",
        ">= 0.7",
        True,
        reference_name=f"psycopg executemany, {args.batch} a transaction",
    )
    vs_single = Comparison(
        "batched vs one record a transaction",
        "records/s",
        "(context)",
        True,
        reference_name="SqlUpsertSink.write per record",
    )
    p50 = Comparison(
        f"latency of a batch of {args.batch}, p50",
        "ms",
        "(context)",
        False,
        reference_name="executemany p50",
    )
    p99 = Comparison(
        f"latency of a batch of {args.batch}, p99",
        "ms",
        "(context)",
        False,
        reference_name="executemany p99",
    )
    single_p50: list[float] = []
    single_p99: list[float] = []
    recorded = [vs_plain, vs_single, p50, p99]
    for round_ in range(args.rounds + 1):  # round 0 warms up and is not recorded
        print(f"round {round_}/{args.rounds}", flush=True)
        tag = uuid.uuid4().hex[:8]
        records = _records(args.records, f"bench-{tag}")
        for table in ("bench_batched", "bench_plain", "bench_single"):
            _fresh(database, table)
        order = [0, 1, 2] if round_ % 2 == 0 else [2, 1, 0]
        results: dict[int, tuple[float, list[float]]] = {}
        for which in order:
            if which == 0:
                results[0] = _ours(database, records, args.batch)
            elif which == 1:
                results[1] = _executemany(database, records, args.batch)
            else:
                single = _records(args.single_records, f"bench-{tag}-single")
                results[2] = _one_per_transaction(database, single)
        if round_ == 0:
            continue
        (ours_s, ours_lat), (plain_s, plain_lat) = results[0], results[1]
        single_s, single_lat = results[2]
        vs_plain.ours.append(args.records / ours_s)
        vs_plain.reference.append(args.records / plain_s)
        vs_single.ours.append(args.records / ours_s)
        vs_single.reference.append(args.single_records / single_s)
        p50.ours.append(percentile(ours_lat, 0.5) * 1e3)
        p50.reference.append(percentile(plain_lat, 0.5) * 1e3)
        p99.ours.append(percentile(ours_lat, 0.99) * 1e3)
        p99.reference.append(percentile(plain_lat, 0.99) * 1e3)
        single_p50.append(percentile(single_lat, 0.5) * 1e3)
        single_p99.append(percentile(single_lat, 0.99) * 1e3)
        print(
            f"  batched {vs_plain.ours[-1]:,.0f}/s, executemany {vs_plain.reference[-1]:,.0f}/s, "
            f"one a transaction {vs_single.reference[-1]:,.0f}/s",
            flush=True,
        )
    med = statistics.median
    vs_single.notes = (
        f"a record's write one a transaction: p50 {med(single_p50):.2f} ms, "
        f"p99 {med(single_p99):.2f} ms (medians over the rounds)"
    )
    return recorded


if __name__ == "__main__":
    main()
