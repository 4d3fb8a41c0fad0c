"""PNG bar charts for the peer benchmark: medians with min-max whiskers.

One bar per system and broker column; the Pulsar systems' bars of a second
column (``fsync off``, ``via non-owner``) are hatched, etcd and ZooKeeper
(which always fsync) appear once.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from bench.peers_report import Workload

#: the first column of each bench (plain bars; the others are hatched)
HEADLINES = ("fsync on", "via owner")
COLORS = {
    "pulsar-map": "#1f77b4",
    "pulsar-map-wait": "#17becf",
    "pulsar-meta": "#4a9fe0",
    "etcd-etcd3": "#2ca02c",
    "etcd-aetcd": "#98df8a",
    "zookeeper": "#d62728",
    "pulsar-raw": "#7f7f7f",
    "TableView": "#7f7f7f",
}


def plot_workload(workload: Workload, path: Path) -> None:
    order = list(COLORS)
    columns = sorted({c for _, c in workload.series}, key=lambda c: (c not in HEADLINES, c))
    series = sorted(
        (s for s in workload.series.values() if s.values),
        key=lambda s: (
            order.index(s.system) if s.system in order else len(order),
            columns.index(s.column),
        ),
    )
    split = len(columns) > 1
    names = [
        f"{s.system} ({s.column})" if split and s.system.startswith("pulsar") else s.system
        for s in series
    ]
    medians = [statistics.median(s.values) for s in series]
    low = [m - min(s.values) for m, s in zip(medians, series, strict=True)]
    high = [max(s.values) - m for m, s in zip(medians, series, strict=True)]
    fig, ax = plt.subplots(figsize=(max(7.0, 0.8 * len(series)), 4.4), dpi=110)
    bars = ax.bar(
        range(len(series)),
        medians,
        yerr=[low, high],
        capsize=4,
        color=[COLORS.get(s.system, "#999999") for s in series],
    )
    for bar, s in zip(bars, series, strict=True):
        if s.column not in HEADLINES:
            bar.set_hatch("//")
            bar.set_edgecolor("white")
    ax.set_xticks(range(len(series)), names, fontsize=7, rotation=30, ha="right")
    ax.set_ylabel(workload.unit + (" (higher is better)" if workload.higher_is_better else ""))
    ax.set_title(workload.title)
    for x, m in enumerate(medians):  # the median, inside the bar's foot
        ax.annotate(
            f"{m:,.0f}",
            (x, 0),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=7,
            color="white",
        )
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
