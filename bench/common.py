"""Shared bench plumbing: a real broker, timing, reports."""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar

from pulsar_state import Position, PulsarMap, Serde, StateConfig
from pulsar_state.deploy.standalone import BrokerInfo, StandaloneBroker

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"


def external_broker() -> tuple[str, str] | None:
    """``PULSAR_STATE_BENCH_SERVICE_URL``/``PULSAR_STATE_BENCH_ADMIN_URL`` when both
    are set: the benchmarks' own variables, never the CLI's ``PULSAR_SERVICE_URL``
    (exported for the CLI, it names a cluster a benchmark must not fill by accident)."""
    service = os.environ.get("PULSAR_STATE_BENCH_SERVICE_URL")
    admin = os.environ.get("PULSAR_STATE_BENCH_ADMIN_URL")
    return (service, admin) if service and admin else None


_JOURNAL_SYNC = re.compile(r'"journalSyncData" : "(true|false)"')


def logged_journal_sync(standalone: StandaloneBroker) -> bool | None:
    """The bookie's ``journalSyncData`` as its last start logged it (its config dump)."""
    return journal_sync_in_log(standalone.log_file)


def journal_sync_in_log(log_file: Path) -> bool | None:
    """``journalSyncData`` as the last bookie start logged in ``log_file`` logged it
    (``None``: no such log, or no config dump in it)."""
    try:
        text = log_file.read_text(errors="replace")
    except OSError:
        return None
    found = _JOURNAL_SYNC.findall(text)
    return found[-1] == "true" if found else None


@contextmanager
def broker(*, journal_sync: bool | None = None, name: str = "bench") -> Iterator[tuple[str, str]]:
    """The cluster of :func:`external_broker` if set, else the embedded standalone.

    Args:
        journal_sync: the bookie's ``journalSyncData`` (fsync of its journal before
            an entry is acknowledged) for this bench broker only; ``None`` keeps the
            product's default. Checked against the bookie's logged configuration.
        name: the broker's data directory under ``.pulsar/`` (one broker each).
    """
    external = external_broker()
    if external:
        yield external
        return
    settings = {} if journal_sync is None else {"journalSyncData": str(journal_sync).lower()}
    standalone = StandaloneBroker(
        data_dir=REPO / ".pulsar" / name, functions=False, broker_settings=settings
    )
    already = standalone.status()
    if (
        already is not None
        and journal_sync is not None
        and logged_journal_sync(standalone) != journal_sync
    ):  # left running with other settings
        standalone.stop()
        already = None
    info: BrokerInfo = standalone.start()
    try:
        if journal_sync is not None and logged_journal_sync(standalone) != journal_sync:
            raise RuntimeError(
                f"the bench broker in {standalone.data_dir} did not start with "
                f"journalSyncData={str(journal_sync).lower()} (see {standalone.log_file})"
            )
        yield info.service_url, info.admin_url
    finally:
        if already is None:
            standalone.stop()


def fill_map(
    service_url: str,
    admin_url: str,
    topic: str,
    keys: int,
    value: Callable[[int], Any],
    *,
    value_serde: Serde[Any] | None = None,
    config: StateConfig | None = None,
    chunk: int = 5000,
) -> None:
    """Write keys ``key-00000000``... (``value(i)`` each) with ``put_all`` of ``chunk``
    keys per write, four writes in flight, printing progress."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        with PulsarMap[str, Any](
            client, topic, admin_url=admin_url, value_serde=value_serde, config=config
        ) as m:
            pending: list[Future[Position]] = []
            for base in range(0, keys, chunk):
                entries = {f"key-{i:08d}": value(i) for i in range(base, min(keys, base + chunk))}
                pending.append(m.put_all(entries))
                if len(pending) >= 4:
                    pending.pop(0).result(timeout=600)
                if base % (chunk * 40) == 0:
                    print(f"  filling {topic}: {base:,}/{keys:,} keys", flush=True)
            for f in pending:
                f.result(timeout=600)
            if m.manager.checkpointer is not None:  # a bulk load ends with a checkpoint
                manifest = m.checkpoint().result(timeout=600)
                print(f"  checkpoint of {manifest.rows:,} keys in {len(manifest.chunks)} chunks")
    finally:
        client.close()


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Comparison:
    """One workload: ours vs a reference, repeated; higher ``value`` is better if ``higher``."""

    name: str
    unit: str
    goal: str
    higher_is_better: bool
    ours: list[float] = field(default_factory=list)
    reference: list[float] = field(default_factory=list)
    reference_name: str = ""
    notes: str = ""

    @property
    def ratios(self) -> list[float]:
        return [o / r for o, r in zip(self.ours, self.reference, strict=True)]

    def row(self) -> str:
        r = self.ratios
        med = statistics.median
        return (
            f"| {self.name} | {med(self.ours):,.2f} {self.unit} | {self.reference_name}: "
            f"{med(self.reference):,.2f} {self.unit} | **{med(r):.2f}** "
            f"({min(r):.2f}-{max(r):.2f}) | {self.goal} |"
        )


def write_report(name: str, title: str, comparisons: list[Comparison], preamble: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    md = RESULTS / f"{name}.md"
    lines = [
        f"# {title}",
        "",
        preamble.strip(),
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| workload | ours (median) | reference (median) | ratio median (min-max) | goal |",
        "|---|---|---|---|---|",
        *[c.row() for c in comparisons],
        "",
    ]
    for c in comparisons:
        if c.notes:
            lines.append(f"- **{c.name}**: {c.notes}")
    md.write_text("\n".join(lines) + "\n")
    (RESULTS / f"{name}.json").write_text(
        json.dumps(
            [
                {
                    "name": c.name,
                    "unit": c.unit,
                    "ours": c.ours,
                    "reference": c.reference,
                    "reference_name": c.reference_name,
                    "ratios": c.ratios,
                    "goal": c.goal,
                }
                for c in comparisons
            ],
            indent=2,
        )
    )
    return md
