"""``make bench-cluster``: the peer bench on a local multi-broker cluster.

The same workloads as ``make bench`` (:mod:`bench.peers`: sync puts,
linearizable reads, contended increments; the bootstrap on request), the same
code paths and the same peers in the same run (etcd and ZooKeeper, each
fsyncing every commit), with the Pulsar systems on a real cluster instead of
the standalone: a :class:`~pulsar_state.deploy.cluster.LocalCluster` (the
``pulsar-state cluster`` launcher) of ``--brokers`` brokers and ``--bookies``
bookies, no authentication, no TLS, no functions worker, started fresh on
``.pulsar/bench-cluster`` (git-ignored) and stopped at the end, on failure and
on SIGTERM too.

Conditions (written out in the report):

- every bookie fsyncs its journal before acknowledging an entry
  (``journalSyncData=true`` through the launcher's ``bookie_settings``, checked
  in each bookie's logged configuration), as etcd and ZooKeeper fsync;
- every entry goes to every bookie (ensemble = write quorum = ack quorum =
  bookies, the launcher's rule);
- load shedding and automatic bundle splits are off, so a topic's owner does
  not move during a run;
- one column per way in: ``via owner`` gives the client the service and admin
  URL of the broker that owns the peer's state topic (an admin lookup made
  before the client opens assigns and finds it), ``via non-owner`` another
  broker's. The binary protocol's lookup redirects a client to the owner when
  it opens, so both columns measure the same data path; a difference would be
  in the open, outside the timing.

Results: ``bench/results/peers_cluster.md`` (+ JSON, PNG plots), with the
standalone's ratios of ``bench/results/peers.json`` beside the cluster's;
``--smoke`` checks it all end to end at a tiny size and writes to
``.cache/bench/results-smoke/`` instead.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import REPO, RESULTS, journal_sync_in_log
from bench.local_server import BenchSetupError
from bench.peers import (
    Urls,
    build_parser,
    check_args,
    load_average,
    measure,
    preflight,
)
from bench.peers_report import NOTES, OURS, report
from pulsar_state.cluster.admin import PulsarAdmin, topic_path
from pulsar_state.deploy.cluster import ClusterInfo, LocalCluster
from pulsar_state.errors import PulsarStateError

NAME = "peers_cluster"
DATA_DIR = REPO / ".pulsar" / "bench-cluster"
OWNER, NON_OWNER = "via owner", "via non-owner"
VIA = {"owner": OWNER, "non-owner": NON_OWNER}
#: every bookie fsyncs its journal before acknowledging (stated, and checked in its log)
BOOKIE_SETTINGS = {"journalSyncData": "true"}
#: a topic's owner stays put during the run
BROKER_SETTINGS = {
    "loadBalancerSheddingEnabled": "false",
    "loadBalancerAutoBundleSplitEnabled": "false",
}
CLUSTER_NOTES = {
    "read": NOTES["read"].replace(
        "Reads write nothing, so they run on the headline broker only.",
        "Measured through each broker column.",
    ),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``make bench-cluster``'s options.

    Returns:
        The completed options (see :func:`bench.peers.check_args`).
    """
    parser = build_parser(
        "Shared state vs etcd and ZooKeeper on a local multi-broker Pulsar cluster.",
        "Smoke run (a few minutes): python -m bench.peers_cluster --smoke",
        workloads="put,read,cas",
    )
    parser.add_argument("--brokers", type=int, default=2, help="brokers (default 2)")
    parser.add_argument(
        "--bookies",
        type=int,
        default=2,
        help="bookies (default 2); every entry is written to and acknowledged by each",
    )
    parser.add_argument(
        "--via",
        default="owner,non-owner",
        help="the broker a client is given: owner, non-owner or both (default)",
    )
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR, help=f"default {DATA_DIR}")
    args = check_args(parser, parser.parse_args(argv))
    args.via_list = [v for v in args.via.split(",") if v]
    if not args.via_list or set(args.via_list) - set(VIA):
        parser.error(f"--via takes owner, non-owner or both, got {args.via!r}")
    if args.brokers < 2 and "non-owner" in args.via_list:
        parser.error("a non-owner needs --brokers 2 or more (or --via owner)")
    return args


# -- the cluster ---------------------------------------------------------------------


@contextmanager
def bench_cluster(data_dir: Path, *, brokers: int, bookies: int) -> Iterator[LocalCluster]:
    """A fresh cluster of the bench's conditions, stopped when the block ends.

    Raises:
        RuntimeError: a bookie did not log ``journalSyncData=true``.
    """
    cluster = LocalCluster(
        data_dir=data_dir,
        brokers=brokers,
        bookies=bookies,
        broker_settings=dict(BROKER_SETTINGS),
        bookie_settings=dict(BOOKIE_SETTINGS),
    )
    if cluster.stop():  # a cluster a crashed run left behind
        print(f"stopped a cluster left running on {data_dir}", flush=True)
    try:
        print(f"starting the bench cluster in {data_dir}", flush=True)
        began = time.monotonic()
        cluster.start(fresh=True)
        print(f"cluster ready in {time.monotonic() - began:.0f} s", flush=True)
        for i in range(bookies):
            log_file = cluster.log_file(f"bookie-{i}")
            if journal_sync_in_log(log_file) is not True:
                raise RuntimeError(
                    f"bookie-{i} of {data_dir} did not log journalSyncData=true (see {log_file})"
                )
        yield cluster
    finally:
        print(f"stopping the bench cluster in {data_dir}", flush=True)
        cluster.stop()


def owner_index(info: ClusterInfo, broker_url: str) -> int:
    """The index of the broker whose service URL is ``broker_url`` (a lookup's answer).

    Returns:
        Its index in ``info.service_urls``.

    Raises:
        RuntimeError: no broker of the cluster has that URL.
    """
    wanted = broker_url.rstrip("/")
    for i, url in enumerate(info.service_urls):
        if url.rstrip("/") == wanted:
            return i
    raise RuntimeError(f"the lookup named {broker_url}, not a broker of {info.service_urls}")


def via_urls(info: ClusterInfo, owner_of: Callable[[str], int], *, owner: bool) -> Urls:
    """A column: the URLs of the topic's owner (``owner``), else of the next broker.

    ``owner_of(topic)`` is the owner's index (:func:`lookup_owner`).

    Returns:
        The column's URL function.
    """

    def urls(topic: str) -> tuple[str, str]:
        index = owner_of(topic)
        if not owner:
            index = (index + 1) % len(info.service_urls)
        return info.service_urls[index], info.admin_urls[index]

    return urls


def lookup_owner(info: ClusterInfo) -> Callable[[str], int]:
    """``topic -> index of its owner``: an admin lookup (which assigns the topic's
    bundle to a broker if none owns it yet).

    Returns:
        The lookup function.
    """
    admin = PulsarAdmin(info.admin_urls[0])

    def owner_of(topic: str) -> int:
        resp = admin.request("GET", f"/lookup/v2/topic/{topic_path(topic)}")
        if resp.status_code != 200:
            raise RuntimeError(f"lookup of {topic}: {resp.status_code} {resp.text[:200]}")
        return owner_index(info, resp.json()["brokerUrl"])

    return owner_of


# -- the report ----------------------------------------------------------------------


def header(args: argparse.Namespace, info: ClusterInfo, loads: tuple[float, float]) -> list[str]:
    """The report's top: what ran, on what, under which conditions.

    Returns:
        Markdown lines.
    """
    cores = os.cpu_count() or 1
    lines = ["# Shared state vs etcd and ZooKeeper on a multi-broker Pulsar cluster", ""]
    if args.smoke:
        lines += [
            "> **Smoke run** (`--smoke`: 1 round, tiny sizes): it checks the bench end to end;",
            "> its figures are not results.",
            "",
        ]
    if loads[0] > 0.5 * cores:
        lines += [
            f"> **Taken on a busy shared machine** (1-minute load average {loads[0]:.1f} on",
            f"> {cores} cores before the run): rerun `make bench-cluster` on a quiet one.",
            "",
        ]
    lines += [
        "Generated by `make bench-cluster` (`python -m bench.peers_cluster`): the workloads",
        "and code paths of `make bench` ([peers.md](peers.md)) with the Pulsar systems on a",
        f"local Pulsar {info.version} cluster, etcd 3.4 and ZooKeeper 3.8 (single node each,",
        "fsyncing every commit) in the same run. Each round runs every system; figures are",
        f"medians over {args.rounds} round(s) with (min-max), after {args.warmup_rounds}",
        "unrecorded warm-up round(s); ratios are taken within a round.",
        "",
        f"Machine: {platform.machine()}, {cores} cores shared by every "
        f"process below; run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; 1-minute "
        f"load average {loads[0]:.1f} before, {loads[1]:.1f} after. Sizes: {args.puts} puts, "
        f"{args.reads} reads, {args.cas_processes}x{args.cas_per_process} increments.",
        "",
        "Conditions:",
        "",
        f"- **Cluster**: {args.brokers} brokers, {args.bookies} bookie(s), one ZooKeeper, "
        "each in its own JVM on loopback (the `pulsar-state cluster` launcher), started "
        "fresh for the run; no authentication, no TLS, no functions worker.",
        f"- **Replication**: ensemble {args.bookies}, write quorum {args.bookies}, ack quorum "
        f"{args.bookies}: every entry is on every bookie before the broker acknowledges it.",
        "- **fsync on**: every bookie fsyncs its journal before acknowledging an entry "
        "(`journalSyncData=true`, checked in each bookie's logged configuration), as etcd "
        "(its WAL) and ZooKeeper (`forceSync=yes`) fsync every commit. One disk for all.",
        "- **Owners stay put**: load shedding and automatic bundle splits are off.",
        f"- **{OWNER}**: the client is given the service and admin URL of the broker that "
        "owns the peer's state topic (found by an admin lookup before the client opens). "
        f"**{NON_OWNER}**: another broker's; the client's lookup is redirected to the owner "
        "when it opens (outside the timing), and it then talks to the owner, so both columns "
        "measure the same data path. Side topics (a map's snapshot topic, the metadata "
        "store's sessions) may be owned by either broker.",
        "- etcd and ZooKeeper run once per round, in the first column; every ratio takes them "
        "from there.",
        "",
    ]
    return lines


def _median_ratio(summary: dict[str, Any], workload: str, ours: str, peer: str, column: str) -> str:
    """The median ratio of ``ours / peer`` in ``column`` of a report's JSON (peer
    ``etcd``: that run's etcd reference)."""
    data = summary.get(workload) or {}
    if peer == "etcd":
        peer = data.get("etcd_reference") or ""
    for record in data.get("ratios", []):
        if (record["ours"], record["peer"], record["column"]) == (ours, peer, column):
            values = record["values"]
            return f"{statistics.median(values):.2f}" if values else "-"
    return "-"


def beside_standalone(cluster: dict[str, Any], standalone: dict[str, Any] | None) -> list[str]:
    """A table of the headline ratios: the standalone's (fsync on) beside the cluster's.

    Returns:
        Markdown lines (none without the standalone's JSON).
    """
    if standalone is None or "meta" not in cluster:
        return []
    columns = cluster["meta"]["columns"]
    run = standalone.get("meta", {}).get("run", "?")
    head = f"| workload | ours / peer | standalone, fsync on ({run}) |"
    rule = "|---|---|---|"
    for c in columns:
        head += f" cluster, {c} |"
        rule += "---|"
    lines = [
        "## Beside the standalone",
        "",
        "Median ratios (ops/s, ours / peer, within a round), the standalone's from",
        "[peers.json](peers.json) of `make bench` (another run; its fsync-on column), the",
        "cluster's from this run. `etcd` is each run's etcd reference (its faster client).",
        "",
        head,
        rule,
    ]
    for workload in ("put", "read", "cas"):
        if workload not in cluster:
            continue
        for ours in OURS:
            for peer in ("etcd", "zookeeper"):
                row = f"| {workload} | {ours} / {peer} |"
                cells = [_median_ratio(standalone, workload, ours, peer, "fsync on")]
                cells += [_median_ratio(cluster, workload, ours, peer, c) for c in columns]
                if all(cell == "-" for cell in cells):
                    continue
                lines.append(row + "".join(f" {cell} |" for cell in cells))
    return [*lines, ""]


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


# -- the run -------------------------------------------------------------------------


def run(args: argparse.Namespace) -> None:
    """Start the cluster, measure, stop it, write the report."""
    preflight(args.system_list)
    load_before = load_average()
    with bench_cluster(args.data_dir, brokers=args.brokers, bookies=args.bookies) as cluster:
        info = cluster.require_running()
        owner_of = lookup_owner(info)
        columns = {
            VIA[v]: via_urls(info, owner_of, owner=v == "owner")
            for v in ("owner", "non-owner")
            if v in args.via_list
        }
        workloads = measure(args, columns, reads_everywhere=True)
    labels, load_after = list(columns), load_average()
    meta = {
        "load_before": load_before,
        "load_after": load_after,
        "brokers": args.brokers,
        "bookies": args.bookies,
        "ensemble_write_ack": [args.bookies] * 3,
        "bookie_settings": BOOKIE_SETTINGS,
        "broker_settings": BROKER_SETTINGS,
        "pulsar": info.version,
    }
    top = header(args, info, (load_before, load_after))
    md = report(workloads, labels, args, top, name=NAME, notes=CLUSTER_NOTES, meta=meta)
    cluster_json = _json(md.with_suffix(".json"))
    extra = beside_standalone(cluster_json or {}, _json(RESULTS / "peers.json"))
    if extra:
        md.write_text(md.read_text() + "\n".join(extra) + "\n")
        print("\n".join(extra))


def _terminated(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)  # unwinds: the cluster and the peers are stopped


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminated)
    try:
        run(args)
    except (BenchSetupError, PulsarStateError) as exc:
        print(f"bench-cluster: cannot run: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
