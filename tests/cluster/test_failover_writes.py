"""Issue #27: writes through a kill -9 of the broker that owns the map's topic.

A map keeps updating one counter while the owning broker is killed, on the
session's cluster (token auth, TLS) and on one without authentication. The other
broker takes the topic over once the dead broker's metadata session expires
(~30 s on this cluster's defaults), and the writer settles what was in doubt
before it writes again. What must hold, whatever the timing:

- every write's future completes by itself: with the position (applied),
  ``WriteInDoubtError`` (sent, outcome unknown: its budget ran out first) or
  ``WriteFailedError`` (nothing landed) — never a hang, never a bare timeout
  of ours;
- every acknowledged increment is in the final value exactly once, and the
  acknowledged ones return 1, 2, 3, ... (a serial order), in-doubt ones in
  between at most once each.

How long the outage lasted for a writer is printed (it is measured, not
asserted) and recorded in docs/reliability.md; the run's row goes to the fault
report's section "On a local cluster".
"""

from __future__ import annotations

import threading
import time

import pytest
from cluster_access import QUIET, bearer, created_on_one, owner_index
from cluster_history import report_counter
from fault_report import FaultReport
from harness import wait_until

from pulsar_state import PulsarMap, StateConfig
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.errors import WriteFailedError, WriteInDoubtError
from pulsar_state.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(900)

#: each write's own budget (RetryPolicy.deadline_s, the default): what a caller
#: waiting without a timeout of its own waits at most, plus the last attempt
WRITE_BUDGET_S = 120.0


def test_a_counter_through_a_kill_of_the_owning_broker(
    either_cluster: EmbeddedCluster, fault_report: FaultReport
) -> None:
    cluster = either_cluster
    topic, elsewhere = created_on_one(cluster, "failover-counter")
    owner = owner_index(cluster, topic)
    client = cluster.client(operation_timeout_seconds=30, logger=QUIET)
    endpoint = AdminEndpoint(url=elsewhere, headers=bearer(cluster) or None)
    outcomes: list[tuple[str, int | None, float, float]] = []  # kind, value, began, took
    stop = threading.Event()
    killed_at: list[float] = []

    def write_on(m: PulsarMap[str, int]) -> None:
        while not stop.is_set():
            began = time.monotonic()
            future = m.update("n", lambda v: (v or 0) + 1)
            try:
                # no timeout of the caller's: the write's own budget bounds it
                value = future.result(timeout=WRITE_BUDGET_S + 60)
                outcomes.append(("ok", value, began, time.monotonic() - began))
            except WriteInDoubtError:
                outcomes.append(("in_doubt", None, began, time.monotonic() - began))
            except WriteFailedError:
                outcomes.append(("failed", None, began, time.monotonic() - began))

    try:
        with PulsarMap[str, int](
            client, topic, admin=endpoint, config=StateConfig(operation_timeout_s=30)
        ) as m:
            writer = threading.Thread(target=write_on, args=(m,), daemon=True)
            writer.start()
            wait_until(lambda: len(outcomes) >= 20, timeout_s=120, message="20 writes")
            killed_at.append(time.monotonic())
            cluster.kill_broker(owner)
            wait_until(
                lambda: sum(1 for k, _, b, _ in outcomes if k == "ok" and b > killed_at[0]) >= 20,
                timeout_s=WRITE_BUDGET_S * 3,
                interval_s=1,
                message="20 writes begun after the kill acknowledged",
            )
            stop.set()
            writer.join(WRITE_BUDGET_S + 90)
            assert not writer.is_alive(), "a write's future never completed"
            final = m.get("n", latest=True).result(120)
    finally:
        client.close()
        cluster.start_broker(owner)  # the next tests get both brokers again

    acked = [v for k, v, _, _ in outcomes if k == "ok"]
    doubtful = sum(1 for k, *_ in outcomes if k == "in_doubt")
    kill = killed_at[0]
    resumed = min(began + took for k, _, began, took in outcomes if k == "ok" and began > kill)
    report_counter(
        fault_report,
        cluster,
        test="kill -9 of the owning broker (1 writer, `update` of a counter)",
        outcomes=[k for k, *_ in outcomes],
        acked=acked,
        final=final,
        faults="1x kill -9 of the owning broker",
        recovery=f"{resumed - kill:.1f}s to the first write acknowledged after the kill",
    )
    assert acked == sorted(acked) and len(set(acked)) == len(acked), acked  # a serial order
    assert final is not None and len(acked) <= final <= len(acked) + doubtful, (
        final,
        len(acked),
        doubtful,
    )
    spanning = [took for k, _, began, took in outcomes if began <= kill + 1 and began + took > kill]
    print(
        f"failover: {len(outcomes)} writes, {doubtful} in doubt, "
        f"{sum(1 for k, *_ in outcomes if k == 'failed')} failed; the writes spanning the kill "
        f"took {max(spanning, default=0):.1f}s; first write acknowledged "
        f"{resumed - kill:.1f}s after the kill"
    )
