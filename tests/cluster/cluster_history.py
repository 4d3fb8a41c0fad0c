"""Register histories on a local cluster, checked and reported as the fault suite's.

:func:`cluster_workload` sets up register workers (tests/register_worker.py,
one process each) on a map of the cluster, with the cluster's token and each
worker on another broker's admin API; :func:`check_and_report` checks every
key's history plus a final latest read by a fresh map (linearizability is
local), counts acknowledged increments missing from the final values, and adds
the row to the fault report's section "On a local cluster"
(tests/fault_report.py) before it asserts.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pulsar
from cluster_access import admin_endpoint
from fault_report import FaultReport, FaultScale
from linearizability import Op, check_register
from workload import Fault, HistoryStats, Workload, count_takeovers, load_history

from pulsar_state import PulsarMap
from pulsar_state.testing import EmbeddedCluster

#: counters (cas and incr) and the key of the blind puts; reads take any
COUNTERS = ("x", "y")
PUT_KEY = "p"
KEYS = (*COUNTERS, PUT_KEY)


def cluster_shape(cluster: EmbeddedCluster) -> str:
    """What the cluster is, for the report: brokers, bookies, authentication, TLS.

    Returns:
        e.g. ``2 brokers, 1 bookie, token auth, TLS``.
    """
    config = cluster.cluster.config
    parts = [
        f"{config.brokers} broker{'s' if config.brokers > 1 else ''}",
        f"{config.bookies} bookie{'s' if config.bookies > 1 else ''}",
        "token auth" if config.auth == "token" else "no auth",
    ]
    if config.tls:
        parts.append("TLS")
    return ", ".join(parts)


def cluster_workload(
    cluster: EmbeddedCluster,
    client: pulsar.Client,
    topic: str,
    workdir: Path,
    scale: FaultScale,
    **options: Any,
) -> Workload:
    """Register workers of ``scale`` on ``topic`` (its keys set to 0 first): reads,
    CAS and increments on :data:`COUNTERS`, blind puts to :data:`PUT_KEY`.

    Returns:
        The workload, not started; ``options`` override its fields.
    """
    with PulsarMap[str, int](client, topic, admin=admin_endpoint(cluster)) as m:
        m.put_all(dict.fromkeys(KEYS, 0)).result(60)
    settings: dict[str, Any] = {
        "service_url": cluster.service_url,
        "admin_url": cluster.admin_urls[0],
        "admin_urls": tuple(cluster.admin_urls),
        "token": cluster.superuser_token,
        "topic": topic,
        "key": COUNTERS[0],
        "keys": KEYS,
        "put_keys": (PUT_KEY,),
        "ops": ("read", "cas", "incr", "write"),
        "workdir": workdir,
        "workers": scale.workers,
        "seconds": scale.seconds,
        **options,
    }
    return Workload(**settings)


def fault_summary(faults: list[Fault]) -> str:
    """``2x broker restart, 1x ...``: each kind of fault and how often.

    Returns:
        The summary, ``none`` without faults.
    """
    kinds = sorted({f.kind for f in faults})
    return ", ".join(f"{sum(f.kind == k for f in faults)}x {k}" for k in kinds) or "none"


def check_and_report(
    cluster: EmbeddedCluster,
    client: pulsar.Client,
    workload: Workload,
    report: FaultReport,
    *,
    test: str,
    recovery: str = "-",
    note: str = "",
) -> HistoryStats:
    """Check the history (every key, with a final latest read), report, then assert.

    Returns:
        The whole history's figures.

    Raises:
        AssertionError: a worker failed, a key's history is not linearizable, an
            acknowledged increment is missing, or too little happened to mean anything.
    """
    for process, code in workload.exit_codes().items():
        assert code == 0, f"worker {process} exited {code}:\n{workload.worker_log(process)}"
    stats = load_history(workload.workdir)
    failures: list[str] = []
    lost = 0
    with PulsarMap[str, int](client, workload.topic, admin=admin_endpoint(cluster)) as fresh:
        for key in workload.keys:
            per_key = load_history(workload.workdir, key)
            call = time.monotonic_ns() / 1e9
            final = fresh.get(key, latest=True).result(120)
            read = Op(-1, "read", None, final, call, time.monotonic_ns() / 1e9)
            if not check_register([*per_key.ops, read], initial=0).ok:
                failures.append(f"{key}: not linearizable")
            assert sum(op.known and op.kind != "read" for op in per_key.ops) > 5, key
            if key not in workload.put_keys:
                lost += max(0, per_key.acked_increments - (final or 0))
                if (final or 0) > per_key.acked_increments + per_key.unknown_writes:
                    failures.append(f"{key}: {final} is more than was ever written")
    report.add(
        test=test,
        cluster=cluster_shape(cluster),
        ops=len(stats.ops) + len(workload.keys),
        ok=stats.ok + len(workload.keys),
        unknown=stats.unknown,
        failed=stats.failed,
        faults=fault_summary(workload.faults),
        takeovers=count_takeovers(client, workload.topic),
        violations=len(failures),
        lost=lost,
        recovery=recovery,
        note=note,
    )
    assert not failures, failures
    assert lost == 0, f"{lost} acknowledged increments lost"
    return stats


def report_counter(
    report: FaultReport,
    cluster: EmbeddedCluster,
    *,
    test: str,
    outcomes: list[str],
    acked: list[int],
    final: int | None,
    faults: str,
    recovery: str,
    serial: bool | None = None,
) -> None:
    """The row of a counter run: writes whose outcomes are ``ok``, ``in_doubt`` or
    ``failed``, the acknowledged results ``acked``, the ``final`` value read at the
    end. Violations: results not ``serial`` (default: ``acked`` not rising), a
    result acknowledged twice, a final value above every write that may have
    landed; lost: acknowledged increments missing from the final value."""
    doubtful = outcomes.count("in_doubt")
    rising = acked == sorted(acked) if serial is None else serial
    value = final or 0
    violations = (
        int(not rising) + int(len(set(acked)) != len(acked)) + int(value > len(acked) + doubtful)
    )
    report.add(
        test=test,
        cluster=cluster_shape(cluster),
        ops=len(outcomes) + 1,
        ok=outcomes.count("ok") + 1,
        unknown=doubtful,
        failed=outcomes.count("failed"),
        faults=faults,
        takeovers="-",
        violations=violations,
        lost=max(0, len(acked) - value),
        recovery=recovery,
    )
