"""``make bench``: the shared state against etcd, ZooKeeper, TableView and raw Pulsar.

In one run on this machine: the embedded Pulsar standalone, etcd (Debian
``etcd-server``) and ZooKeeper (Debian ``zookeeper``) on loopback, each driven
through :mod:`bench.peer_clients` by identical workloads:

1. ``put``: sync puts from one client (throughput, p50, p99); the raw Pulsar
   producer on the same broker is the ceiling;
2. ``read``: linearizable reads of one key (``latest=True``; etcd's default
   ``get``; ZooKeeper ``sync`` + ``get``);
3. ``cas``: contended increments of one key from 4 client processes; the final
   value is checked against the number of acknowledged increments;
4. ``bootstrap``: opening a map of ``--bootstrap-keys`` keys on a compacted
   topic, ours against Pulsar's ``TableView`` on the same topic.

Equal durability: etcd and ZooKeeper fsync every commit, so the headline
column runs the Pulsar systems on a bench broker whose bookie fsyncs its
journal too (``journalSyncData=true``); a second bench broker with the
standalone's default (``journalSyncData=false``) gives the ``fsync off``
column, in the same rounds. etcd is driven through both the synchronous
``etcd3`` and the asyncio ``aetcd`` client; the faster one (median) is the
etcd reference of the ratios, and both are reported.

Every measurement runs in a fresh spawned process (``etcd3`` needs the
pure-Python protobuf runtime, which must not slow the other clients). Every
round runs every system (order rotated per round); each figure is also given as
a ratio against each peer *within the same round*, reported as the median with
min and max over rounds. Results: ``bench/results/peers.md`` (+ JSON, PNG
plots), linked from the README; ``--smoke`` checks the whole bench end to end
at a tiny size and writes to ``.cache/bench/results-smoke/`` instead.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import queue
import statistics
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.bootstrap_probe import run_probe
from bench.common import REPO, RESULTS, broker, external_broker, fill_map, percentile
from bench.etcd_server import EtcdServer
from bench.local_server import BenchSetupError
from bench.peer_clients import CHILD_ENV, CLIENT_MODULES, PULSAR_SYSTEMS, Peer, PeerSpec
from bench.zookeeper_server import ZooKeeperServer
from pulsar_state import BytesSerde
from pulsar_state.cluster.admin import PulsarAdmin
from pulsar_state.errors import PulsarStateError
from pulsar_state.topic_names import full_topic_name

ON, OFF, GIVEN = "fsync on", "fsync off", "as configured"
OURS = ("pulsar-map", "pulsar-map-wait", "pulsar-meta")
ETCD = ("etcd-etcd3", "etcd-aetcd")
ORDER = (
    "pulsar-map",
    "pulsar-map-wait",
    "pulsar-meta",
    "etcd-etcd3",
    "etcd-aetcd",
    "zookeeper",
    "pulsar-raw",
    "TableView",
)
ALL_SYSTEMS = ORDER[:-1]
NOTES = {
    "put": "One client, one key of 1,000 at a time, 100-byte values, each put waited for; "
    "after the timed puts the last key is read back and checked. "
    "`pulsar-map` completes at the broker's ack, applied to the writer's own state "
    "(read-your-writes; the product's default, commit on ack); "
    "`pulsar-meta` also checks and bumps the node's version; `pulsar-raw` is "
    "`producer.send` on the same broker, the ceiling for anything built on Pulsar.",
    "read": "A linearizable read of one key: `get(latest=True)` (one `get_last_message_id` "
    "round trip when caught up), etcd's default `get` (a quorum read), ZooKeeper `sync` + "
    "`get`. Every read is checked against the value written. Reads write nothing, so they "
    "run on the headline broker only.",
    "cas": "Every process increments the same key: `pulsar-map` with `update` (the writer "
    're-runs the function on the latest state; default `access_mode="adaptive"`), the '
    "others by versioned compare-and-set with client-side retries (counted). p50/p99 are "
    "per increment, retries included. The final value is checked against the number of "
    "acknowledged increments (a mismatch fails the run). `pulsar-map-wait` queues writers "
    '(`access_mode="wait"`, PIP-68 `WaitForExclusive`): a holder keeps the topic while it '
    "has writes.",
    "bootstrap": "Open a map of this many keys on a compacted topic until it holds them all, "
    "each in a fresh process: `PulsarMap` (its newest columnar checkpoint, written by the "
    "loader's `checkpoint()` after the bulk load, then the raw tail after it; the probe "
    "checks it started from the checkpoint) against Pulsar's own `TableView` (C++) on the "
    "same topic; the count of keys each holds is checked, and each process's peak resident "
    "memory is reported. One open per round, so the table gives the open time (median, "
    "min-max) instead of per-operation percentiles. Reads only: headline broker only.",
}
VALUE = b"v" * 100
SMOKE_RESULTS = REPO / ".cache" / "bench" / "results-smoke"


@dataclass
class Series:
    """One system on one broker column in one workload: a figure per round."""

    system: str
    column: str
    values: list[float] = field(default_factory=list)
    p50_us: list[float] = field(default_factory=list)
    p99_us: list[float] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    #: bootstrap: the probe process's peak resident memory per round
    rss_mb: list[float] = field(default_factory=list)


@dataclass
class Workload:
    name: str
    title: str
    unit: str
    higher_is_better: bool
    series: dict[tuple[str, str], Series] = field(default_factory=dict)

    def add(self, system: str, column: str) -> Series:
        return self.series.setdefault((system, column), Series(system, column))

    def get(self, system: str, column: str) -> Series | None:
        found = self.series.get((system, column))
        return found if found is not None and found.values else None

    def etcd_reference(self, column: str) -> str | None:
        """The faster etcd client here (by median), the etcd reference of the ratios."""
        found = [s for s in (self.get(e, column) for e in ETCD) if s is not None]
        if not found:
            return None
        best = max if self.higher_is_better else min
        return best(found, key=lambda s: statistics.median(s.values)).system


def _med(values: list[float], digits: int = 1) -> str:
    if not values:
        return "-"
    return (
        f"{statistics.median(values):,.{digits}f} "
        f"({min(values):,.{digits}f}-{max(values):,.{digits}f})"
    )


def _ratio_cell(ratios: list[float], bold: bool = True) -> str:
    if not ratios:
        return "-"
    med = f"{statistics.median(ratios):.2f}"
    return f"{'**' + med + '**' if bold else med} ({min(ratios):.2f}-{max(ratios):.2f})"


def _per_round(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=True) if y]


# -- measurements, each in a fresh spawned process -----------------------------------


def _latencies(fn: Callable[[int], None], n: int) -> tuple[float, list[float]]:
    samples = []
    start = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - t) * 1e6)
    return time.perf_counter() - start, samples


def _summary(n: int, elapsed: float, samples: list[float]) -> list[float]:
    return [n / elapsed, percentile(samples, 0.5), percentile(samples, 0.99)]


def _check_read(got: bytes | None, key: str) -> None:
    if got != VALUE:
        raise AssertionError(f"read back {got!r} under {key!r}, expected the 100-byte value")


def _job_put_read(peer: Peer, *, system: str, puts: int, reads: int) -> dict[str, Any]:
    for i in range(min(100, puts)):  # warm-up: connections, producers, JIT
        peer.put(f"w{i}", VALUE)
    elapsed, samples = _latencies(lambda i: peer.put(f"k{i % 1000}", VALUE), puts)
    out: dict[str, Any] = {"put": _summary(puts, elapsed, samples)}
    if system == "pulsar-raw":
        return out
    last = f"k{(puts - 1) % 1000}"
    _check_read(peer.read_latest(last), last)
    if reads:
        for _ in range(min(100, reads)):
            peer.read_latest("k1")
        elapsed, samples = _latencies(lambda _: _check_read(peer.read_latest("k1"), "k1"), reads)
        out["read"] = _summary(reads, elapsed, samples)
    return out


def _job_cas(peer: Peer, *, n: int) -> dict[str, Any]:
    retries, samples = 0, []
    for _ in range(n):
        t = time.perf_counter()
        retries += peer.increment("counter")
        samples.append((time.perf_counter() - t) * 1e6)
    return {"done": n, "retries": retries, "samples": samples}


def _job_value(peer: Peer, *, key: str) -> dict[str, Any]:
    return {"value": peer.read_latest(key)}


JOBS: dict[str, Callable[..., dict[str, Any]]] = {
    "put_read": _job_put_read,
    "cas": _job_cas,
    "value": _job_value,
}


def _child(
    job: str, spec: PeerSpec, params: dict[str, Any], messages: Any, go: Any
) -> None:  # pragma: no cover - runs in a spawned process
    try:
        peer = spec.open()
    except BaseException:
        messages.put(("error", traceback.format_exc()))
        return
    try:
        messages.put(("ready", os.getpid()))
        if not go.wait(timeout=600):
            raise TimeoutError("no start signal from the bench within 600 s")
        messages.put(("ok", JOBS[job](peer, **params)))
    except BaseException:
        messages.put(("error", traceback.format_exc()))
    finally:
        peer.close()


@contextmanager
def _environment(extra: dict[str, str]) -> Iterator[None]:
    """``extra`` in ``os.environ`` while children are spawned (they inherit it)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _gather(messages: Any, procs: list[Any], kind: str, timeout_s: float, what: str) -> list[Any]:
    """``len(procs)`` messages of ``kind``; raise on a child's error, death or the timeout."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < len(procs):
        try:
            tag, body = messages.get(timeout=1.0)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"{what}: a process died (exit {dead[0].exitcode})") from None
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{what}: no {kind} from every process in {timeout_s:.0f} s"
                ) from None
            continue
        if tag == "error":
            raise RuntimeError(f"{what} failed in its process:\n{body}")
        if tag == kind:
            got.append(body)
    return got


def run_in_children(
    spec: PeerSpec, job: str, params: dict[str, Any], count: int = 1, timeout_s: float = 600
) -> tuple[list[dict[str, Any]], float]:
    """Run ``job`` in ``count`` fresh processes started together; (results, wall seconds).

    Each process opens its peer before the common start signal, so connection set-up
    is outside the wall time; a process that fails fails the run with its traceback.
    """
    ctx = mp.get_context("spawn")
    messages, go = ctx.Queue(), ctx.Event()
    what = f"{spec.name} {job}"
    with _environment(CHILD_ENV.get(spec.name, {})):
        procs = [
            ctx.Process(target=_child, args=(job, spec, params, messages, go), daemon=True)
            for _ in range(count)
        ]
        for p in procs:
            p.start()
    try:
        _gather(messages, procs, "ready", 180, what)
        start = time.perf_counter()
        go.set()
        results = _gather(messages, procs, "ok", timeout_s, what)
        wall = time.perf_counter() - start
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
    return results, wall


def _record(series: Series, summary: list[float]) -> None:
    series.values.append(summary[0])
    series.p50_us.append(summary[1])
    series.p99_us.append(summary[2])


def run_put_and_read(
    spec: PeerSpec, column: str, *, puts: int, reads: int, put: Workload, read: Workload
) -> None:
    params = {"system": spec.name, "puts": puts, "reads": reads}
    (out,), _ = run_in_children(spec, "put_read", params)
    _record(put.add(spec.name, column), out["put"])
    if "read" in out:
        _record(read.add(spec.name, column), out["read"])


def run_cas(spec: PeerSpec, column: str, processes: int, per_process: int, cas: Workload) -> None:
    outcomes, wall = run_in_children(spec, "cas", {"n": per_process}, count=processes)
    done = sum(o["done"] for o in outcomes)
    retries = sum(o["retries"] for o in outcomes)
    samples = [s for o in outcomes for s in o["samples"]]
    (checked,), _ = run_in_children(spec, "value", {"key": "counter"})
    final = int(checked["value"] or b"0")
    if final != done:
        raise AssertionError(f"{spec.name}: {done} acknowledged increments, final value {final}")
    series = cas.add(spec.name, column)
    _record(series, _summary(done, wall, samples))
    series.extra.append(f"{retries} retries")


def compact(admin: PulsarAdmin, topic: str, timeout_s: float = 900.0) -> None:
    """Compact ``topic`` up to its end (twice: a run already going may predate the end)."""
    deadline = time.monotonic() + timeout_s
    for _ in range(2):
        admin.compact(topic)
        while (status := admin.compaction_status(topic)) != "SUCCESS":
            if status == "ERROR" or time.monotonic() > deadline:
                raise RuntimeError(f"compaction of {topic}: {status}")
            time.sleep(0.5)


def run_bootstrap(
    service_url: str, admin_url: str, topic: str, *, keys: int, column: str, boot: Workload
) -> None:
    """Ours and TableView, each in a fresh process (see :mod:`bench.bootstrap_probe`)."""
    for system, kind in (("pulsar-map", "ours"), ("TableView", "tableview")):
        probe = run_probe(kind, service_url, admin_url, topic)
        seconds, seen = float(probe["seconds"]), int(probe["keys"])
        if seen != keys:
            raise AssertionError(f"{system} bootstrap saw {seen} keys, expected {keys}")
        if kind == "ours" and probe["source"] != "checkpoint":
            raise AssertionError(f"our bootstrap started from {probe['source']}, not a checkpoint")
        series = boot.add(system, column)
        series.values.append(keys / seconds)
        series.extra.append(f"{seconds:.3f}")
        series.rss_mb.append(float(probe["rss_mb"]))


# -- set-up checks -------------------------------------------------------------------


def preflight(systems: list[str]) -> None:
    """Every chosen peer's client imports (in the environment its process gets)."""
    try:
        import matplotlib  # noqa: F401, PLC0415 - only checked here
    except ImportError as exc:
        raise BenchSetupError(
            "matplotlib is missing (the plots): .venv/bin/pip install -e '.[bench]'"
        ) from exc
    for system in systems:
        module = CLIENT_MODULES.get(system)
        if module is None:
            continue
        env = {**os.environ, **CHILD_ENV.get(system, {})}
        done = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            hint = f" (its process runs with {CHILD_ENV[system]})" if system in CHILD_ENV else ""
            raise BenchSetupError(
                f"{system}: `import {module}` fails{hint}: {last}; install the bench extra "
                "(.venv/bin/pip install -e '.[bench]', which `make bench` does) or leave "
                f"{system} out with --systems"
            )


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


# -- the run -------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Shared state vs etcd, ZooKeeper, TableView and raw Pulsar.",
        epilog="Smoke run (about 2 min): python -m bench.peers --smoke",
    )
    parser.add_argument("--rounds", type=int, default=3, help="recorded rounds")
    parser.add_argument(
        "--warmup-rounds", type=int, default=1, help="unrecorded rounds first (default 1)"
    )
    parser.add_argument("--puts", type=int, default=1000)
    parser.add_argument("--reads", type=int, default=1000)
    parser.add_argument("--cas-processes", type=int, default=4)
    parser.add_argument("--cas-per-process", type=int, default=150)
    parser.add_argument("--bootstrap-keys", type=int, default=1_000_000)
    parser.add_argument("--workloads", default="put,read,cas,bootstrap")
    parser.add_argument(
        "--systems",
        default=",".join(ALL_SYSTEMS),
        help=f"comma-separated subset of {','.join(ALL_SYSTEMS)}",
    )
    parser.add_argument(
        "--journal-sync",
        choices=("both", "on", "off"),
        default="both",
        help="bench brokers: bookie journal fsync on (headline), off, or both (default)",
    )
    parser.add_argument("--out", type=Path, help="results directory (default bench/results)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny end-to-end check: 1 round, no warm-up, small sizes, "
        "results in .cache/bench/results-smoke/",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.warmup_rounds = 1, 0
        args.puts, args.reads = 200, 200
        args.cas_processes, args.cas_per_process = 2, 20
        args.bootstrap_keys = 2000
        args.out = args.out or SMOKE_RESULTS
    args.out = args.out or RESULTS
    args.chosen = [w for w in args.workloads.split(",") if w]
    unknown = set(args.chosen) - set(NOTES)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; choose from {sorted(NOTES)}")
    args.system_list = [s for s in args.systems.split(",") if s]
    unknown = set(args.system_list) - set(ALL_SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {list(ALL_SYSTEMS)}")
    if args.rounds < 1 or args.warmup_rounds < 0:
        parser.error("--rounds must be >= 1 and --warmup-rounds >= 0")
    return args


def run(args: argparse.Namespace) -> None:
    chosen, systems = set(args.chosen), args.system_list
    preflight(systems)
    load_before = _load()
    put = Workload("put", "sync put, one client", "ops/s", True)
    read = Workload("read", "linearizable read of one key", "ops/s", True)
    cas = Workload("cas", f"contended increments, {args.cas_processes} processes", "ops/s", True)
    boot = Workload(
        "bootstrap", f"bootstrap of {args.bootstrap_keys:,} keys (compacted)", "keys/s", True
    )
    if external_broker():
        print(
            "PULSAR_STATE_BENCH_SERVICE_URL/PULSAR_STATE_BENCH_ADMIN_URL set: one column, "
            "that cluster as configured"
        )
        wanted: list[tuple[str, bool | None]] = [(GIVEN, None)]
    else:
        wanted = [(ON, True), (OFF, False)]
        wanted = [w for w in wanted if args.journal_sync in ("both", "on" if w[1] else "off")]
    with ExitStack() as stack:
        columns: dict[str, tuple[str, str]] = {}
        for label, sync in wanted:
            name = "bench-fsync" if sync else "bench"
            print(f"starting the bench broker ({label}) in .pulsar/{name}", flush=True)
            columns[label] = stack.enter_context(broker(journal_sync=sync, name=name))
        headline = next(iter(columns))
        servers: dict[str, Any] = {}
        if any(s.startswith("etcd") for s in systems):
            servers["etcd"] = stack.enter_context(EtcdServer())
        if "zookeeper" in systems:
            servers["zookeeper"] = stack.enter_context(ZooKeeperServer())
        etcd_port = servers["etcd"].port if "etcd" in servers else 0
        zk_port = servers["zookeeper"].port if "zookeeper" in servers else 0
        targets = [(s, c) for s in systems if s in PULSAR_SYSTEMS for c in columns]
        targets += [(s, headline) for s in systems if s not in PULSAR_SYSTEMS]
        boot_topic = full_topic_name(f"bench-peers-boot-{uuid.uuid4().hex[:8]}")
        if "bootstrap" in chosen:
            service_url, admin_url = columns[headline]
            print(f"writing {args.bootstrap_keys:,} keys and compacting", flush=True)
            fill_map(
                service_url,
                admin_url,
                boot_topic,
                args.bootstrap_keys,
                lambda _: VALUE,
                value_serde=BytesSerde(),
            )
            compact(PulsarAdmin(admin_url), boot_topic)
        total = args.warmup_rounds + args.rounds
        for round_ in range(total):
            recorded = round_ >= args.warmup_rounds
            print(f"round {round_ + 1}/{total}{'' if recorded else ' (warm-up)'}", flush=True)
            workloads = (
                (put, read, cas, boot)
                if recorded
                else tuple(
                    Workload(w.name, w.title, w.unit, w.higher_is_better)
                    for w in (put, read, cas, boot)
                )
            )
            shift = round_ % len(targets)
            for system, column in targets[shift:] + targets[:shift]:
                service_url, admin_url = columns[column]
                spec = PeerSpec(
                    system,
                    f"{system}-{uuid.uuid4().hex[:8]}",
                    service_url,
                    admin_url,
                    etcd_port=etcd_port,
                    zookeeper_port=zk_port,
                )
                reads = args.reads if "read" in chosen and column == headline else 0
                puts = args.puts if "put" in chosen or reads else 0  # reads need a value
                if puts and system != "pulsar-map-wait":
                    print(f"  {system} ({column}): put/read", flush=True)
                    run_put_and_read(
                        spec, column, puts=puts, reads=reads, put=workloads[0], read=workloads[1]
                    )
                if "cas" in chosen and system != "pulsar-raw":
                    print(f"  {system} ({column}): cas", flush=True)
                    spec = replace(spec, namespace=f"{system}-cas-{uuid.uuid4().hex[:8]}")
                    run_cas(spec, column, args.cas_processes, args.cas_per_process, workloads[2])
            if "bootstrap" in chosen:
                print("  bootstrap", flush=True)
                service_url, admin_url = columns[headline]
                run_bootstrap(
                    service_url,
                    admin_url,
                    boot_topic,
                    keys=args.bootstrap_keys,
                    column=headline,
                    boot=workloads[3],
                )
    if "put" not in chosen:
        put.series.clear()
    report(
        [w for w in (put, read, cas, boot) if w.name in chosen and w.series],
        list(columns),
        args,
        load_before,
        _load(),
    )


# -- the report ----------------------------------------------------------------------


def _header(
    args: argparse.Namespace, columns: list[str], load_before: float, load_after: float
) -> list[str]:
    cores = os.cpu_count() or 1
    lines = ["# Shared state vs etcd, ZooKeeper, TableView and raw Pulsar", ""]
    if args.smoke:
        lines += [
            "> **Smoke run** (`--smoke`: 1 round, tiny sizes): it checks the bench end to end;",
            "> its figures are not results.",
            "",
        ]
    if load_before > 0.5 * cores:
        lines += [
            f"> **Taken on a busy shared machine** (1-minute load average {load_before:.1f} on",
            f"> {cores} cores before the run): rerun `make bench` on a quiet one.",
            "",
        ]
    lines += [
        "Generated by `make bench` (`python -m bench.peers`). One run, one machine, every",
        "server on loopback: the embedded Pulsar 4.0.8 standalone, etcd 3.4 and ZooKeeper",
        "3.8 from Debian's packages (single node each), clients in Python (`pulsar-client`;",
        "etcd through both `etcd3` and `aetcd`; `kazoo`), each measurement in a fresh process.",
        f"Each round runs every system; figures are medians over {args.rounds} round(s) with",
        f"(min-max), after {args.warmup_rounds} unrecorded warm-up round(s); ratios are",
        "taken within a round.",
        "",
        f"Machine: {platform.machine()}, {cores} cores, Python {platform.python_version()}; "
        f"run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; 1-minute load average "
        f"{load_before:.1f} before, {load_after:.1f} after. Sizes: {args.puts} puts, "
        f"{args.reads} reads, {args.cas_processes}x{args.cas_per_process} increments, "
        f"{args.bootstrap_keys:,} bootstrap keys.",
        "",
    ]
    if GIVEN in columns:
        lines += [
            "Pulsar: the cluster of `PULSAR_STATE_BENCH_SERVICE_URL`, durability as "
            "configured there.",
            "",
        ]
    else:
        lines += [
            "Durability: etcd (WAL) and ZooKeeper (`forceSync=yes`) fsync every commit before",
            "acknowledging it. **fsync on** (the headline) runs the Pulsar systems on a bench",
            "broker whose bookie fsyncs its journal before acknowledging an entry",
            "(`journalSyncData=true`, checked in the bookie's logged configuration), as a",
            "production bookie does; **fsync off** on one with the standalone's default",
            "(`journalSyncData=false`: in the journal, not yet on disk). etcd and ZooKeeper",
            "cannot skip fsync (etcd 3.4 has no such option), so their one measurement is the",
            "reference of both columns.",
            "",
        ]
    return lines


def _columns(w: Workload, columns: list[str]) -> list[str]:
    """The broker columns ``w`` was measured on (reads and bootstrap: the headline only)."""
    return [c for c in columns if any(col == c for _, col in w.series)] or columns[:1]


def _system_table(w: Workload, columns: list[str]) -> list[str]:
    systems = sorted({s for s, _ in w.series}, key=ORDER.index)
    if w.name == "bootstrap":
        lines = [
            "| system | keys/s | open time, s | peak RSS, MB | notes |",
            "|---|---|---|---|---|",
        ]
        for system in systems:
            s = w.get(system, columns[0])
            if s is not None:
                lines.append(
                    f"| {system} | {_med(s.values)} | {_med([float(x) for x in s.extra], 3)} "
                    f"| {_med(s.rss_mb, 0) if s.rss_mb else '-'} |  |"
                )
        return lines
    head, rule = "| system |", "|---|"
    for c in columns:
        head += f" {c}: {w.unit} | p50 µs | p99 µs |"
        rule += "---|---|---|"
    lines = [head + " notes |", rule + "---|"]
    for system in systems:
        row, notes = f"| {system} |", []
        for c in columns:
            s = w.get(system, c)
            if s is None:
                fsyncs = system not in PULSAR_SYSTEMS and w.get(system, columns[0]) is not None
                row += f" {'(always fsyncs)' if fsyncs else '-'} | - | - |"
            else:
                row += f" {_med(s.values)} | {_med(s.p50_us)} | {_med(s.p99_us)} |"
                if s.extra:
                    split = len(columns) > 1 and system in PULSAR_SYSTEMS
                    notes.append(f"{c}: {', '.join(s.extra)}" if split else ", ".join(s.extra))
        lines.append(row + f" {'; '.join(notes)} |")
    return lines


def _ratio_rows(w: Workload, columns: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    headline = columns[0]
    etcd = w.etcd_reference(headline)
    peers = [p for p in (etcd, "zookeeper") if p and w.get(p, headline)]
    lines: list[str] = []
    if etcd:
        figures = ", ".join(
            f"`{e}` {statistics.median(s.values):,.1f}"
            for e in ETCD
            if (s := w.get(e, headline)) is not None
        )
        lines += [
            f"etcd reference: `{etcd}`, the faster client here (median {w.unit}: {figures}).",
            "",
        ]
    if w.name == "bootstrap":
        mine, ref = w.get("pulsar-map", headline), w.get("TableView", headline)
        if mine is None or ref is None:
            return lines, []
        r = _per_round(mine.values, ref.values)
        lines += [
            "| ratio (same round) | keys/s |",
            "|---|---|",
            f"| pulsar-map / TableView | {_ratio_cell(r)} |",
        ]
        return lines, [{"ours": "pulsar-map", "peer": "TableView", "column": headline, "values": r}]
    head, rule = "| ours / peer (same round) |", "|---|"
    for c in columns:
        head += f" {c}: {w.unit} | {c}: p99 |"
        rule += "---|---|"
    lines += [head, rule]
    records: list[dict[str, Any]] = []
    for ours in OURS:
        for peer in [*peers, "pulsar-raw"]:
            row, any_cell = f"| {ours} / {peer} |", False
            for c in columns:
                a = w.get(ours, c)
                b = w.get(peer, c if peer in PULSAR_SYSTEMS else headline)
                if a is None or b is None:
                    row += " - | - |"
                    continue
                any_cell = True
                values, p99 = _per_round(a.values, b.values), _per_round(a.p99_us, b.p99_us)
                row += f" {_ratio_cell(values)} | {_ratio_cell(p99, bold=False)} |"
                records.append(
                    {"ours": ours, "peer": peer, "column": c, "values": values, "p99": p99}
                )
            if any_cell:
                lines.append(row)
    lines += [
        "",
        f"Above 1 in {w.unit}: ours is faster; below 1 in p99: ours has the lower tail latency.",
    ]
    return lines, records


def report(
    workloads: list[Workload],
    columns: list[str],
    args: argparse.Namespace,
    load_before: float,
    load_after: float,
) -> None:
    from bench.plots import plot_workload  # noqa: PLC0415 - matplotlib only here

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    lines = _header(args, columns, load_before, load_after)
    summary: dict[str, Any] = {
        "meta": {
            "smoke": args.smoke,
            "rounds": args.rounds,
            "columns": columns,
            "load_before": load_before,
            "load_after": load_after,
            "cores": os.cpu_count(),
            "run": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    }
    for w in workloads:
        lines += [f"## {w.title}", "", NOTES[w.name], "", f"![{w.name}](peers_{w.name}.png)", ""]
        measured = _columns(w, columns)
        lines += _system_table(w, measured)
        lines.append("")
        ratio_lines, ratios = _ratio_rows(w, measured)
        lines += ratio_lines
        lines.append("")
        plot_workload(w, out / f"peers_{w.name}.png")
        summary[w.name] = {
            "unit": w.unit,
            "etcd_reference": w.etcd_reference(columns[0]),
            "series": [
                {
                    "system": s.system,
                    "column": s.column,
                    "values": s.values,
                    "p50_us": s.p50_us,
                    "p99_us": s.p99_us,
                    "notes": s.extra,
                }
                for s in sorted(w.series.values(), key=lambda s: (ORDER.index(s.system), s.column))
            ],
            "ratios": ratios,
        }
    (out / "peers.json").write_text(json.dumps(summary, indent=2))
    md = out / "peers.md"
    md.write_text("\n".join(lines) + "\n")
    print(md.read_text())
    print(f"written: {md}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        run(args)
    except (BenchSetupError, PulsarStateError) as exc:
        print(f"bench: cannot run: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
