"""The peer benchmark's figures and report: :class:`Workload`, its tables, its files.

A :class:`Workload` holds one figure per round for each (system, column); the
report gives per-system tables (median, min-max; p50, p99) and ratio tables
(ours over each peer, taken within a round), writes ``<name>.md``,
``<name>.json`` and ``<name>_<workload>.png``. The columns are the Pulsar
set-ups a run measured (``fsync on``/``fsync off`` brokers for ``make bench``,
the broker a client talks to for ``make bench-cluster``); etcd and ZooKeeper
run once, in the first (headline) column.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.peer_clients import PEERS, PULSAR_SYSTEMS

ON, OFF, GIVEN = "fsync on", "fsync off", "as configured"
OURS = ("pulsar-map", "pulsar-map-wait", "pulsar-meta")
ETCD = ("etcd-etcd3", "etcd-aetcd")
ORDER = (*PEERS, "TableView")
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


# -- the tables and files -------------------------------------------------------------


def _columns(w: Workload, columns: list[str]) -> list[str]:
    """The broker columns ``w`` was measured on (reads and bootstrap: the headline only)."""
    return [c for c in columns if any(col == c for _, col in w.series)] or columns[:1]


def _once(column: str, headline: str) -> str:
    """The cell of a peer (etcd, ZooKeeper: one server, measured once) in ``column``."""
    return "(always fsyncs)" if column == OFF else f"(measured once: {headline})"


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
                once = system not in PULSAR_SYSTEMS and w.get(system, columns[0]) is not None
                row += f" {_once(c, columns[0]) if once else '-'} | - | - |"
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
    header: list[str],
    *,
    name: str = "peers",
    notes: dict[str, str] | None = None,
    meta: dict[str, Any] | None = None,
) -> Path:
    """Write ``<name>.md`` (``header``, then each workload's tables), ``<name>.json``
    and ``<name>_<workload>.png`` into ``args.out``; print the Markdown.

    Args:
        notes: what each workload measures, instead of :data:`NOTES`'s text.
        meta: more entries of the JSON's ``meta`` (the run's conditions).

    Returns:
        The Markdown file written.
    """
    from bench.plots import plot_workload  # noqa: PLC0415 - matplotlib only here

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    lines = list(header)
    summary: dict[str, Any] = {
        "meta": {
            "smoke": args.smoke,
            "rounds": args.rounds,
            "columns": columns,
            "cores": os.cpu_count(),
            "run": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **(meta or {}),
        }
    }
    for w in workloads:
        text = {**NOTES, **(notes or {})}[w.name]
        plot = f"{name}_{w.name}.png"
        lines += [f"## {w.title}", "", text, "", f"![{w.name}]({plot})", ""]
        measured = _columns(w, columns)
        lines += _system_table(w, measured)
        lines.append("")
        ratio_lines, ratios = _ratio_rows(w, measured)
        lines += ratio_lines
        lines.append("")
        plot_workload(w, out / plot)
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
    (out / f"{name}.json").write_text(json.dumps(summary, indent=2))
    md = out / f"{name}.md"
    md.write_text("\n".join(lines) + "\n")
    print(md.read_text())
    print(f"written: {md}")
    return md
