"""Issue #27: writers through a rolling restart of the brokers.

Register workers in processes of their own (the cluster's token; each on
another broker's admin API, the client given every broker) run latest reads,
compare-and-sets and increments on two counters and blind puts to a third
key, while each broker in turn is stopped cleanly (SIGTERM: it hands its
topics over as it shuts down), started again and waited for until it is
healthy and listed (``pulsar-state cluster restart-broker``, run as an
operator runs it). At the short scale every broker restarts once; at the full
scale the rounds go on for ``FaultScale.seconds``. What must hold:

- every broker was restarted (its pid changed) and the topic's owner, read
  from the admin API before and after each restart, changed at least once:
  the writers really moved;
- the history of each key plus a final latest read by a fresh map is
  linearizable, and no acknowledged increment is missing from the final
  values (a lost acknowledged put is a violation too).

The row goes to the fault report's section "On a local cluster".
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from cluster_access import QUIET, created_on_one, owner_index
from cluster_history import check_and_report, cluster_workload
from fault_report import FaultReport, FaultScale
from harness import pulsar_state_cli, wait_until
from workload import Fault, Workload, first_success_after, load_history

from pulsar_state.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(900)

#: operations every round of restarts waits for after each broker is back
AFTER_EACH = 40


def _completed_since(workload: Workload, instant_s: float) -> int:
    return sum(op.known and op.ret >= instant_s for op in load_history(workload.workdir).ops)


def test_writers_ride_through_a_rolling_restart(
    local_cluster: EmbeddedCluster,
    tmp_path: Path,
    fault_scale: FaultScale,
    fault_report: FaultReport,
) -> None:
    cluster = local_cluster
    topic, _ = created_on_one(cluster, "rolling")
    client = cluster.client(operation_timeout_seconds=30, logger=QUIET)
    owners = [owner_index(cluster, topic)]
    data_dir = str(cluster.cluster.data_dir)
    restarted: dict[int, list[tuple[int | None, int | None]]] = {}  # broker -> (pid before, after)
    stops: list[tuple[Fault, float]] = []  # each restart and when its stop began

    def nemesis(w: Workload) -> None:
        wait_until(
            lambda: _completed_since(w, 0.0) >= AFTER_EACH,
            timeout_s=180,
            message=f"{AFTER_EACH} operations before the first restart (see the worker logs)",
        )
        while True:
            for index in range(len(cluster.admin_urls)):
                before = cluster.cluster.broker_pid(index)
                fault = Fault("broker restart (SIGTERM, start)", w.elapsed())
                began = time.monotonic_ns() / 1e9
                # as an operator does it (a process of its own, from the data directory)
                done = pulsar_state_cli(
                    "cluster",
                    "restart-broker",
                    "--data-dir",
                    data_dir,
                    str(index),
                    env={},
                    timeout_s=600,
                )
                assert done.returncode == 0, done.stderr
                up = time.monotonic_ns() / 1e9
                fault.detail = f"broker-{index} down and ready again in {up - began:.1f}s"
                w.faults.append(fault)
                stops.append((fault, began))
                restarted.setdefault(index, []).append((before, cluster.cluster.broker_pid(index)))
                owners.append(owner_index(cluster, topic))
                wait_until(
                    lambda up=up: _completed_since(w, up) >= AFTER_EACH,
                    timeout_s=300,
                    interval_s=0.5,
                    message=f"{AFTER_EACH} operations after broker-{index} was back",
                )
            if fault_scale.name != "full" or w.elapsed() >= fault_scale.seconds:
                break
        w.finish()

    workload = cluster_workload(
        cluster, client, topic, tmp_path, fault_scale, seconds=fault_scale.seconds + 600, seed=11
    )
    try:
        workload.run_with(nemesis)
        stats = load_history(workload.workdir)
        recoveries = []
        for fault, began in stops:
            fault.recovery_s = first_success_after(stats, began)
            recoveries.append(
                f"{fault.recovery_s:.1f}s" if fault.recovery_s is not None else "never"
            )
        changes = sum(a != b for a, b in itertools.pairwise(owners))
        check_and_report(
            cluster,
            client,
            workload,
            fault_report,
            test=f"rolling restart of the brokers ({fault_scale.workers} processes; "
            "CAS, increments, blind puts; 3 keys)",
            recovery=", ".join(recoveries),
            note=f"rolling restart: the topic's owner went {' -> '.join(map(str, owners))} "
            f"({changes} moves); {'; '.join(f.detail for f in workload.faults)}; recovery = "
            "from a broker's stop until every process completed an operation again",
        )
    finally:
        client.close()

    assert sorted(restarted) == list(range(len(cluster.admin_urls))), restarted
    for index, pids in restarted.items():
        assert all(b is not None and a is not None and a != b for b, a in pids), (index, pids)
    assert changes >= 1, f"the topic never changed its owner: {owners}"
    print(f"rolling restart: owners {owners}, {len(stats.ops)} operations")
