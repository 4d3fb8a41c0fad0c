"""Issue #27: a bookie killed under contended writes loses nothing acknowledged.

Three bookies; the map's namespace asks for an ensemble of 2 with write and
ack quorum 2 (a persistence policy, as an operator sets it), so each entry is
on two bookies and a ledger can go on without one. Two processes update one
counter in the same map; a bookie that holds the topic's current ledger is
killed with ``kill -9`` (``pulsar-state cluster kill-bookie``, as an operator
would). What must hold:

- writes go on after the kill (BookKeeper replaces the dead bookie in the
  ledger's ensemble);
- every acknowledged increment is in the final value exactly once: the
  acknowledged results are distinct, rise within each process (a serial order),
  and the final value read by a new map after the topic is unloaded (its
  ledger recovered from the bookies left, nothing served from the broker's
  cache) equals their number, plus at most the writes left in doubt.
"""

from __future__ import annotations

import multiprocessing
import queue
import re
import time
from pathlib import Path
from typing import Any

import pulsar
import pytest
import requests
from cluster_history import report_counter
from fault_report import FaultReport
from harness import join_draining, pulsar_state_cli, unique_name, wait_until
from stacks import dump_stacks, stacks_on_sigusr1

from pulsar_state import PulsarMap, StateConfig
from pulsar_state.cluster.admin import topic_path
from pulsar_state.errors import WriteFailedError, WriteInDoubtError
from pulsar_state.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(900)

#: each write's own budget (RetryPolicy.deadline_s, the default)
WRITE_BUDGET_S = 120.0
WRITERS = 2
#: acknowledged writes each process makes before the kill, and again after it
BEFORE = AFTER = 20


def count_up(
    service_url: str,
    admin_url: str,
    topic: str,
    *,
    outcomes: multiprocessing.Queue[tuple[int, str, int | None, float]],
    stop: Any,
    writer: int,
    log_dir: str,
) -> None:
    """One writer process: increment ``n`` until ``stop`` is set; each outcome to ``outcomes``
    as (writer, kind, value, when it began)."""
    stacks_on_sigusr1(log_dir)
    quiet = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet)
    try:
        with PulsarMap[str, int](
            client, topic, admin_url=admin_url, config=StateConfig(operation_timeout_s=60)
        ) as m:
            while not stop.is_set():
                began = time.time()
                future = m.update("n", lambda v: (v or 0) + 1)
                try:
                    outcomes.put((writer, "ok", future.result(WRITE_BUDGET_S + 60), began))
                except WriteInDoubtError:
                    outcomes.put((writer, "in_doubt", None, began))
                except WriteFailedError:
                    outcomes.put((writer, "failed", None, began))
    finally:
        client.close()


def current_ensemble(admin_url: str, topic: str) -> tuple[int, list[str]]:
    """The ensemble size of the topic's current ledger and the bookies of its last ensemble."""
    stats = requests.get(
        f"{admin_url}/admin/v2/{topic_path(topic)}/internalStats?metadata=true", timeout=30
    )
    stats.raise_for_status()
    metadata = stats.json()["ledgers"][-1]["metadata"]
    size = int(re.search(r"ensembleSize=(\d+)", metadata).group(1))  # type: ignore[union-attr]
    last = re.findall(r"\d+=\[([^\]]*)\]", metadata)[-1]
    return size, [bookie.strip() for bookie in last.split(",")]


def test_a_counter_through_a_kill_of_a_bookie(
    three_bookie_cluster: EmbeddedCluster, fault_report: FaultReport, tmp_path: Path
) -> None:
    cluster = three_bookie_cluster
    admin = cluster.admin_url
    namespace = f"public/{unique_name('bookies')}"
    made = requests.put(f"{admin}/admin/v2/namespaces/{namespace}", timeout=30)
    assert made.status_code in (200, 204), made.text
    quorum = {"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2}
    policy = requests.post(
        f"{admin}/admin/v2/namespaces/{namespace}/persistence",
        json={**quorum, "managedLedgerMaxMarkDeleteRate": 0},
        timeout=30,
    )
    assert policy.status_code in (200, 204), policy.text
    topic = f"persistent://{namespace}/counter"

    ctx = multiprocessing.get_context("spawn")
    outcomes: multiprocessing.Queue[tuple[int, str, int | None, float]] = ctx.Queue()
    stop = ctx.Event()
    writers = [
        ctx.Process(
            target=count_up,
            args=(cluster.service_url, admin, topic),
            kwargs={"outcomes": outcomes, "stop": stop, "writer": w, "log_dir": str(tmp_path)},
            daemon=True,
        )
        for w in range(WRITERS)
    ]
    seen: list[tuple[int, str, int | None, float]] = []

    def drain() -> list[tuple[int, str, int | None, float]]:
        while True:
            try:
                seen.append(outcomes.get_nowait())
            except queue.Empty:
                return seen

    def acked_each(since: float) -> bool:
        drain()
        return all(
            sum(1 for w, k, _, b in seen if w == writer and k == "ok" and b > since) >= BEFORE
            for writer in range(WRITERS)
        )

    for process in writers:
        process.start()
    try:
        wait_until(lambda: acked_each(0.0), timeout_s=180, message="writes before the kill")
        size, ensemble = current_ensemble(admin, topic)
        assert size == 2, "the namespace's persistence policy did not apply"
        victim = next(i for i in range(3) if cluster.cluster.bookie_id(i) in ensemble)
        killed_at = time.time()
        data_dir = str(cluster.cluster.data_dir)
        kill = pulsar_state_cli(
            "cluster", "kill-bookie", "--data-dir", data_dir, str(victim), env={}
        )
        assert kill.returncode == 0, kill.stderr
        assert cluster.cluster.processes()[f"bookie-{victim}"] is None
        wait_until(
            lambda: acked_each(killed_at),
            timeout_s=WRITE_BUDGET_S * 3,
            interval_s=1,
            message=f"{AFTER} writes of each process begun after the kill acknowledged",
        )
        _, after = current_ensemble(admin, topic)
        stop.set()
        # each write ends within its budget, and a writer stops after its current one
        join_draining(writers, drain, timeout_s=WRITE_BUDGET_S + 90)
        for process in writers:
            assert process.exitcode == 0, (
                f"a writer exited with {process.exitcode}; its threads:\n"
                + ("" if process.pid is None else dump_stacks(process.pid, tmp_path))
            )
        # the ledger is closed and recovered from the bookies left; a new map replays it
        unloaded = requests.put(f"{admin}/admin/v2/{topic_path(topic)}/unload", timeout=60)
        assert unloaded.status_code in (200, 204), unloaded.text
        client = cluster.client(operation_timeout_seconds=60)
        try:
            with PulsarMap[str, int](client, topic, admin_url=admin) as fresh:
                final = fresh.get("n", latest=True).result(120)
        finally:
            client.close()
    finally:
        stop.set()
        for process in writers:
            if process.is_alive():
                process.kill()
    # start-bookie brings it back
    started = pulsar_state_cli(
        "cluster", "start-bookie", "--data-dir", data_dir, str(victim), env={}, timeout_s=300
    )
    assert started.returncode == 0, started.stderr
    assert all(cluster.cluster.processes().values())

    acked = [v for _, k, v, _ in seen if k == "ok" and v is not None]
    doubtful = sum(1 for _, k, _, _ in seen if k == "in_doubt")
    own_results = [
        [v for w, k, v, _ in seen if w == writer and k == "ok"] for writer in range(WRITERS)
    ]
    serial = all(own == sorted(own) for own in own_results)
    resumed = min((b for _, k, _, b in seen if k == "ok" and b > killed_at), default=None)
    report_counter(
        fault_report,
        cluster,
        test=f"a bookie of the current ledger killed ({WRITERS} processes, `update` of a "
        "counter; ensemble, write and ack quorum 2)",
        outcomes=[k for _, k, _, _ in seen],
        acked=acked,
        final=final,
        faults="1x kill -9 of a bookie",
        recovery="-"
        if resumed is None
        else f"no pause: a write begun {resumed - killed_at:.1f}s after the kill acknowledged",
        serial=serial,
    )
    for writer, own in enumerate(own_results):
        assert own == sorted(own), f"writer {writer}'s acknowledged results are not serial"
    assert len(set(acked)) == len(acked), "an increment was acknowledged twice"
    assert final is not None and len(acked) <= final <= len(acked) + doubtful, (
        final,
        len(acked),
        doubtful,
    )
    print(
        f"bookie loss: killed bookie-{victim} ({cluster.cluster.bookie_id(victim)}) of the "
        f"ensemble {ensemble}; the ensemble after it: {after}; {len(seen)} writes, "
        f"{len(acked)} acknowledged, {doubtful} in doubt, final {final}"
    )
