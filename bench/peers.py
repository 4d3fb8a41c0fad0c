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
import os
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import REPO, RESULTS, broker, external_broker, fill_map
from bench.etcd_server import EtcdServer
from bench.local_server import BenchSetupError
from bench.peer_clients import (
    CHILD_ENV,
    CLIENT_MODULES,
    PULSAR_SYSTEMS,
    PeerSpec,
    state_topic,
)
from bench.peer_runs import VALUE, compact, run_bootstrap, run_cas, run_put_and_read
from bench.peers_report import (
    ALL_SYSTEMS,
    GIVEN,
    NOTES,
    OFF,
    ON,
    Workload,
    report,
)
from bench.zookeeper_server import ZooKeeperServer
from pulsar_state import BytesSerde
from pulsar_state.cluster.admin import PulsarAdmin
from pulsar_state.errors import PulsarStateError

SMOKE_RESULTS = REPO / ".cache" / "bench" / "results-smoke"


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


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


# -- the run -------------------------------------------------------------------------

#: a Pulsar column: the (service URL, admin URL) a client of a given state topic uses
Urls = Callable[[str], tuple[str, str]]


def fixed_urls(service_url: str, admin_url: str) -> Urls:
    """One broker (or one cluster's URLs) for every topic.

    Returns:
        The column's URL function.
    """
    return lambda _topic: (service_url, admin_url)


def build_parser(
    description: str, epilog: str, *, workloads: str = "put,read,cas,bootstrap"
) -> argparse.ArgumentParser:
    """The options every peer bench takes (rounds, sizes, workloads, systems, output).

    Returns:
        The parser; :func:`check_args` completes what it parses.
    """
    parser = argparse.ArgumentParser(description=description, epilog=epilog)
    parser.add_argument("--rounds", type=int, default=3, help="recorded rounds")
    parser.add_argument(
        "--warmup-rounds", type=int, default=1, help="unrecorded rounds first (default 1)"
    )
    parser.add_argument("--puts", type=int, default=1000)
    parser.add_argument("--reads", type=int, default=1000)
    parser.add_argument("--cas-processes", type=int, default=4)
    parser.add_argument("--cas-per-process", type=int, default=150)
    parser.add_argument("--bootstrap-keys", type=int, default=1_000_000)
    parser.add_argument("--workloads", default=workloads)
    parser.add_argument(
        "--systems",
        default=",".join(ALL_SYSTEMS),
        help=f"comma-separated subset of {','.join(ALL_SYSTEMS)}",
    )
    parser.add_argument("--out", type=Path, help="results directory (default bench/results)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny end-to-end check: 1 round, no warm-up, small sizes, "
        "results in .cache/bench/results-smoke/",
    )
    return parser


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """``--smoke``'s sizes, the output directory, the workload and system lists.

    Returns:
        ``args``, completed (``chosen``, ``system_list``, ``out``).
    """
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``make bench``'s options.

    Returns:
        The completed options (see :func:`check_args`).
    """
    parser = build_parser(
        "Shared state vs etcd, ZooKeeper, TableView and raw Pulsar.",
        "Smoke run (about 2 min): python -m bench.peers --smoke",
    )
    parser.add_argument(
        "--journal-sync",
        choices=("both", "on", "off"),
        default="both",
        help="bench brokers: bookie journal fsync on (headline), off, or both (default)",
    )
    return check_args(parser, parser.parse_args(argv))


def _spec(system: str, namespace: str, urls: Urls, etcd_port: int, zk_port: int) -> PeerSpec:
    service_url, admin_url = urls(state_topic(namespace)) if system in PULSAR_SYSTEMS else ("", "")
    return PeerSpec(
        system,
        namespace,
        service_url,
        admin_url,
        etcd_port=etcd_port,
        zookeeper_port=zk_port,
    )


def measure(
    args: argparse.Namespace, columns: dict[str, Urls], *, reads_everywhere: bool = False
) -> list[Workload]:
    """The rounds of ``args``: the Pulsar systems on every column of ``columns`` (the
    first is the headline), etcd and ZooKeeper (started here, for this call) once.

    Args:
        reads_everywhere: reads on every column, not only on the headline's.

    Returns:
        The chosen workloads that have figures.
    """
    chosen, systems = set(args.chosen), args.system_list
    put = Workload("put", "sync put, one client", "ops/s", True)
    read = Workload("read", "linearizable read of one key", "ops/s", True)
    cas = Workload("cas", f"contended increments, {args.cas_processes} processes", "ops/s", True)
    boot = Workload(
        "bootstrap", f"bootstrap of {args.bootstrap_keys:,} keys (compacted)", "keys/s", True
    )
    headline = next(iter(columns))
    with ExitStack() as stack:
        servers: dict[str, Any] = {}
        if any(s.startswith("etcd") for s in systems):
            servers["etcd"] = stack.enter_context(EtcdServer())
        if "zookeeper" in systems:
            servers["zookeeper"] = stack.enter_context(ZooKeeperServer())
        etcd_port = servers["etcd"].port if "etcd" in servers else 0
        zk_port = servers["zookeeper"].port if "zookeeper" in servers else 0
        targets = [(s, c) for s in systems if s in PULSAR_SYSTEMS for c in columns]
        targets += [(s, headline) for s in systems if s not in PULSAR_SYSTEMS]
        boot_topic = state_topic(f"boot-{uuid.uuid4().hex[:8]}")
        if "bootstrap" in chosen:
            service_url, admin_url = columns[headline](boot_topic)
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
                urls = columns[column]
                spec = _spec(system, f"{system}-{uuid.uuid4().hex[:8]}", urls, etcd_port, zk_port)
                reading = "read" in chosen and (reads_everywhere or column == headline)
                reads = args.reads if reading else 0
                puts = args.puts if "put" in chosen or reads else 0  # reads need a value
                if puts and system != "pulsar-map-wait":
                    print(f"  {system} ({column}): put/read", flush=True)
                    run_put_and_read(
                        spec, column, puts=puts, reads=reads, put=workloads[0], read=workloads[1]
                    )
                if "cas" in chosen and system != "pulsar-raw":
                    print(f"  {system} ({column}): cas", flush=True)
                    namespace = f"{system}-cas-{uuid.uuid4().hex[:8]}"
                    spec = _spec(system, namespace, urls, etcd_port, zk_port)
                    run_cas(spec, column, args.cas_processes, args.cas_per_process, workloads[2])
            if "bootstrap" in chosen:
                print("  bootstrap", flush=True)
                service_url, admin_url = columns[headline](boot_topic)
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
    return [w for w in (put, read, cas, boot) if w.name in chosen and w.series]


def run(args: argparse.Namespace) -> None:
    """``make bench``: the bench brokers (fsync on, off), the rounds, the report."""
    preflight(args.system_list)
    load_before = load_average()
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
        columns: dict[str, Urls] = {}
        for label, sync in wanted:
            name = "bench-fsync" if sync else "bench"
            print(f"starting the bench broker ({label}) in .pulsar/{name}", flush=True)
            columns[label] = fixed_urls(*stack.enter_context(broker(journal_sync=sync, name=name)))
        workloads = measure(args, columns)
    labels, load_after = list(columns), load_average()
    header = _header(args, labels, load_before, load_after)
    meta = {"load_before": load_before, "load_after": load_after}
    report(workloads, labels, args, header, meta=meta)


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


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        run(args)
    except (BenchSetupError, PulsarStateError) as exc:
        print(f"bench: cannot run: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
