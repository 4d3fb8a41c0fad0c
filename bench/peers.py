"""``make bench``: the shared state against etcd, ZooKeeper, TableView and raw Pulsar.

In one run on this machine: the embedded Pulsar standalone, etcd (Debian
``etcd-server``) and ZooKeeper (Debian ``zookeeper``) on loopback, each driven
through :mod:`bench.peer_clients` by identical workloads:

1. ``put``: sync puts from one client (p50/p99 latency, throughput); the raw
   Pulsar producer on the same broker is the ceiling;
2. ``read``: linearizable reads of one key (``latest=True``; etcd's default
   ``get``; ZooKeeper ``sync`` + ``get``);
3. ``cas``: contended increments of one key from 4 client processes; the final
   value is checked against the number of acknowledged increments;
4. ``bootstrap``: opening a map of ``--bootstrap-keys`` keys on a compacted
   topic, ours against Pulsar's ``TableView`` on the same topic.

Every round runs every system (order rotated per round); each figure is also
given as a ratio against each peer *within the same round*, reported as the
median with min and max over rounds. Results: ``bench/results/peers.md`` (+ JSON,
PNG plots), linked from the README.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from bench.bootstrap_probe import run_probe
from bench.common import RESULTS, broker, fill_map, percentile
from bench.etcd_server import EtcdServer
from bench.peer_clients import PeerSpec
from bench.zookeeper_server import ZooKeeperServer
from pulsar_state import BytesSerde
from pulsar_state.admin import PulsarAdmin
from pulsar_state.topic_names import full_topic_name

OURS = ("pulsar-map", "pulsar-map-wait", "pulsar-meta")
ORDER = (
    "pulsar-map",
    "pulsar-map-wait",
    "pulsar-meta",
    "etcd",
    "zookeeper",
    "pulsar-raw",
    "TableView",
)
NOTES = {
    "put": "One client, one key of 1,000 at a time, 100-byte values, each put waited for. "
    "`pulsar-map` completes when its own tailer has applied the write (read-your-writes); "
    "`pulsar-meta` also checks and bumps the node's version; `pulsar-raw` is "
    "`producer.send` on the same broker, the ceiling for anything built on Pulsar.",
    "read": "A linearizable read of one key: `get(latest=True)` (one `get_last_message_id` "
    "round trip when caught up), etcd's default `get` (a quorum read), ZooKeeper `sync` + "
    "`get`.",
    "cas": "Every process increments the same key: `pulsar-map` with `update` (the writer "
    "re-runs the function on the latest state), the others by versioned compare-and-set "
    "with client-side retries (counted). The final value is checked against the number of "
    "acknowledged increments (a mismatch fails the run). With one writer at a time, "
    "every change of writer between processes is an exclusive-producer takeover; "
    '`pulsar-map-wait` queues writers instead (`access_mode="wait"`, PIP-68 '
    "`WaitForExclusive`): a holder keeps the topic while it has writes.",
    "bootstrap": "Open a map of this many keys on a compacted topic until it holds them all, "
    "each in a fresh process: `PulsarMap` (compacted view, then the tail, decoded in Python) "
    "against Pulsar's own `TableView` (C++) on the same topic.",
}
VALUE = b"v" * 100


@dataclass
class Series:
    """One system in one workload: a figure per round (and latency samples)."""

    system: str
    values: list[float] = field(default_factory=list)
    p50_us: list[float] = field(default_factory=list)
    p99_us: list[float] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)


@dataclass
class Workload:
    name: str
    title: str
    unit: str
    higher_is_better: bool
    series: dict[str, Series] = field(default_factory=dict)

    def add(self, system: str) -> Series:
        return self.series.setdefault(system, Series(system))

    def ratios(self, ours: str, peer: str) -> list[float]:
        a, b = self.series[ours].values, self.series[peer].values
        return [x / y for x, y in zip(a, b, strict=True) if y]


def _med(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}-{max(values):,.1f})"


def _latencies(fn: Callable[[int], None], n: int) -> tuple[float, list[float]]:
    samples = []
    start = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - t) * 1e6)
    return time.perf_counter() - start, samples


def _record(series: Series, value: float, samples: list[float]) -> None:
    series.values.append(value)
    series.p50_us.append(percentile(samples, 0.5))
    series.p99_us.append(percentile(samples, 0.99))


def run_put_and_read(spec: PeerSpec, puts: int, reads: int, put: Workload, read: Workload) -> None:
    peer = spec.open()
    try:
        for i in range(100):  # warm-up: connections, producers, JIT
            peer.put(f"w{i}", VALUE)
        elapsed, samples = _latencies(lambda i: peer.put(f"k{i % 1000}", VALUE), puts)
        _record(put.add(spec.name), puts / elapsed, samples)
        if spec.name == "pulsar-raw":
            return
        for _ in range(100):
            peer.read_latest("k1")
        elapsed, samples = _latencies(lambda i: _check_read(peer.read_latest("k1")), reads)
        _record(read.add(spec.name), reads / elapsed, samples)
    finally:
        peer.close()


def _check_read(value: bytes | None) -> None:
    if value != VALUE:
        raise AssertionError(f"read back {value!r}")


def _cas_worker(
    spec: PeerSpec, n: int, ready: Any, go: Any, results: Any
) -> None:  # pragma: no cover - runs in a child process
    peer = spec.open()
    try:
        ready.put(os.getpid())
        go.wait()
        retries = 0
        start = time.perf_counter()
        for _ in range(n):
            retries += peer.increment("counter")
        results.put((n, retries, time.perf_counter() - start))
    except BaseException as exc:
        results.put(exc)
        raise
    finally:
        peer.close()


def run_cas(spec: PeerSpec, processes: int, per_process: int, cas: Workload) -> None:
    ctx = mp.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    workers = [
        ctx.Process(target=_cas_worker, args=(spec, per_process, ready, go, results))
        for _ in range(processes)
    ]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=180)
    start = time.perf_counter()
    go.set()
    outcomes = [results.get(timeout=600) for _ in workers]
    wall = time.perf_counter() - start
    for w in workers:
        w.join(timeout=60)
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    if failures:
        raise RuntimeError(f"{spec.name} cas worker failed: {failures[0]!r}")
    done = sum(o[0] for o in outcomes)
    retries = sum(o[1] for o in outcomes)
    checker = spec.open()
    try:
        final = int(checker.read_latest("counter") or b"0")
    finally:
        checker.close()
    if final != done:
        raise AssertionError(f"{spec.name}: {done} acknowledged increments, final value {final}")
    series = cas.add(spec.name)
    series.values.append(done / wall)
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


def run_bootstrap(service_url: str, admin_url: str, topic: str, keys: int, boot: Workload) -> None:
    """Ours and TableView, each in a fresh process (see :mod:`bench.bootstrap_probe`)."""
    for system, kind in (("pulsar-map", "ours"), ("TableView", "tableview")):
        seconds, seen = run_probe(kind, service_url, admin_url, topic)
        if seen != keys:
            raise AssertionError(f"{system} bootstrap saw {seen} keys, expected {keys}")
        boot.add(system).values.append(keys / seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--puts", type=int, default=1000)
    parser.add_argument("--reads", type=int, default=1000)
    parser.add_argument("--cas-processes", type=int, default=4)
    parser.add_argument("--cas-per-process", type=int, default=150)
    parser.add_argument("--bootstrap-keys", type=int, default=1_000_000)
    parser.add_argument("--workloads", default="put,read,cas,bootstrap")
    args = parser.parse_args()
    chosen = set(args.workloads.split(","))

    put = Workload("put", "sync put, one client", "ops/s", True)
    read = Workload("read", "linearizable read of one key", "ops/s", True)
    cas = Workload("cas", f"contended increments, {args.cas_processes} processes", "ops/s", True)
    boot = Workload(
        "bootstrap", f"bootstrap of {args.bootstrap_keys:,} keys (compacted)", "keys/s", True
    )
    systems = ["pulsar-map", "pulsar-map-wait", "pulsar-meta", "etcd", "zookeeper", "pulsar-raw"]
    with broker() as (service_url, admin_url), EtcdServer() as etcd, ZooKeeperServer() as zk:
        base = PeerSpec("", "", service_url, admin_url, etcd_port=etcd.port, zookeeper_port=zk.port)
        boot_topic = full_topic_name(f"bench-peers-boot-{uuid.uuid4().hex[:8]}")
        if "bootstrap" in chosen:
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
        # round 0 warms every server and client up and is not recorded
        for round_ in range(args.rounds + 1):
            print(f"round {round_}/{args.rounds}", flush=True)
            order = systems[round_ % len(systems) :] + systems[: round_ % len(systems)]
            targets = (
                (put, read, cas, boot)
                if round_
                else tuple(
                    Workload(w.name, w.title, w.unit, w.higher_is_better)
                    for w in (put, read, cas, boot)
                )
            )
            for name in order:
                spec = replace(base, name=name, namespace=f"{name}-{uuid.uuid4().hex[:8]}")
                if chosen & {"put", "read"} and name != "pulsar-map-wait":
                    print(f"  {name}: put/read", flush=True)
                    run_put_and_read(spec, args.puts, args.reads, targets[0], targets[1])
                if "cas" in chosen and name != "pulsar-raw":
                    print(f"  {name}: cas", flush=True)
                    spec = replace(spec, namespace=f"{name}-cas-{uuid.uuid4().hex[:8]}")
                    run_cas(spec, args.cas_processes, args.cas_per_process, targets[2])
            if "bootstrap" in chosen:
                print("  bootstrap", flush=True)
                run_bootstrap(service_url, admin_url, boot_topic, args.bootstrap_keys, targets[3])
    workloads = [w for w in (put, read, cas, boot) if w.name in chosen and w.series]
    report(workloads, args)


def report(workloads: list[Workload], args: argparse.Namespace) -> None:
    from bench.plots import plot_workload  # noqa: PLC0415 - matplotlib only here

    RESULTS.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Shared state vs etcd, ZooKeeper, TableView and raw Pulsar",
        "",
        "Generated by `make bench` (`python -m bench.peers`). One run, one machine, every",
        "server on loopback: the embedded Pulsar 4.0.8 standalone, etcd 3.4 and ZooKeeper",
        "3.8 from Debian's packages (single node each), clients in Python (`pulsar-client`,",
        "`aetcd`, `kazoo`). Each round runs every system; figures are medians over",
        f"{args.rounds} rounds with (min-max); ratios are taken within a round.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "Durability is not equal: etcd and ZooKeeper fsync every commit; the Pulsar",
        "standalone's bookie runs with `journalSyncData=false` (a production bookie",
        "fsyncs). Pulsar acknowledges only once the entry is in the bookie's journal.",
        "",
    ]
    summary: dict[str, Any] = {}
    for w in workloads:
        lines += [f"## {w.title}", "", NOTES[w.name], "", f"![{w.name}](peers_{w.name}.png)", ""]
        lines += ["| system | " + w.unit + " | p50 µs | p99 µs | notes |", "|---|---|---|---|---|"]
        ordered = sorted(w.series.values(), key=lambda s: ORDER.index(s.system))
        for s in ordered:
            note = ", ".join(s.extra) if s.extra else ""
            lines.append(
                f"| {s.system} | {_med(s.values)} | {_med(s.p50_us)} | {_med(s.p99_us)} | {note} |"
            )
        lines += ["", "| ratio (ours / peer, same round) | median (min-max) |", "|---|---|"]
        for ours in (o for o in OURS if o in w.series):
            for peer in (s.system for s in ordered if s.system not in OURS):
                r = w.ratios(ours, peer)
                if r:
                    lines.append(
                        f"| {ours} / {peer} | **{statistics.median(r):.2f}** "
                        f"({min(r):.2f}-{max(r):.2f}) |"
                    )
        lines.append("")
        plot_workload(w, RESULTS / f"peers_{w.name}.png")
        summary[w.name] = {
            s.system: {"values": s.values, "p50_us": s.p50_us, "p99_us": s.p99_us, "notes": s.extra}
            for s in ordered
        }
    (RESULTS / "peers.json").write_text(json.dumps(summary, indent=2))
    md = RESULTS / "peers.md"
    md.write_text("\n".join(lines) + "\n")
    print(md.read_text())


if __name__ == "__main__":
    main()
