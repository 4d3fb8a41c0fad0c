"""PNG bar charts for the peer benchmark: medians with min-max whiskers."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from bench.peers import Workload

COLORS = {
    "pulsar-map": "#1f77b4",
    "pulsar-map-wait": "#17becf",
    "pulsar-meta": "#4a9fe0",
    "etcd": "#2ca02c",
    "zookeeper": "#d62728",
    "pulsar-raw": "#7f7f7f",
    "TableView": "#7f7f7f",
}


def plot_workload(workload: Workload, path: Path) -> None:
    order = list(COLORS)
    series = sorted(
        (s for s in workload.series.values() if s.values),
        key=lambda s: order.index(s.system) if s.system in order else len(order),
    )
    names = [s.system for s in series]
    medians = [statistics.median(s.values) for s in series]
    low = [m - min(s.values) for m, s in zip(medians, series, strict=True)]
    high = [max(s.values) - m for m, s in zip(medians, series, strict=True)]
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    ax.bar(
        names,
        medians,
        yerr=[low, high],
        capsize=4,
        color=[COLORS.get(n, "#999999") for n in names],
    )
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
            fontsize=8,
            color="white",
        )
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
