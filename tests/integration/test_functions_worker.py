"""``pulsar-state worker`` processes run the word count; a killed worker's instance moves.

On the real broker (which has no functions worker of its own): three worker
processes, started by ``fork`` and by ``spawn``, form one group (metadata
manager, membership, leader, assignment, runtime manager); the word count is
created through the metadata manager with two instances on a 2-partition
input; one worker holding an instance is SIGKILLed; the leader moves its
instance to a live worker, which runs it, every word is counted exactly once
and every line has its output (named by its input message).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_name, wait_until
from word_count_workers import assert_counted_exactly, subscription_consumers, word_count_config

from pulsar_state import PulsarMap
from pulsar_state.functions.function_admin import FunctionAdmin
from pulsar_state.functions.worker import run_worker
from pulsar_state.functions.worker_config import WorkerConfig

#: a dead member's instances move after this (plus a heartbeat and a reconcile)
TTL_S = 4.0
WORKERS = ("w1", "w2", "w3")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_word_count_on_three_workers_stays_exact_when_one_is_killed(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, start_method: str
) -> None:
    name = unique_name(f"pw-{start_method}")
    fqn = f"public/default/{name}"
    config = word_count_config(name, pulsar_endpoint.admin_url)
    source = config["inputs"][0]
    created = pulsar_endpoint.admin(
        "PUT", f"/admin/v2/persistent/public/default/{name}-in/partitions", json=2
    )
    assert created.status_code in (200, 204), created.text
    ctx = multiprocessing.get_context(start_method)
    processes: dict[str, Any] = {}
    for worker_id in WORKERS:
        worker = WorkerConfig(
            service_url=pulsar_endpoint.service_url,
            admin_url=pulsar_endpoint.admin_url,
            group=name,
            worker_id=worker_id,
            member_ttl_s=TTL_S,
            reconcile_interval_s=0.5,
        )
        processes[worker_id] = ctx.Process(target=run_worker, args=(worker,), daemon=True)
        processes[worker_id].start()
    admin = FunctionAdmin(client, WorkerConfig(service_url="", group=name).topics, timeout_s=60)
    state = PulsarMap[str, Any](
        client, config["userConfig"]["stateTopic"], admin_url=pulsar_endpoint.admin_url
    )
    try:
        wait_until(
            lambda: admin.members() == sorted(WORKERS),
            timeout_s=120,
            interval_s=0.5,
            message="three live workers",
        )
        record = admin.create(fqn, config)
        assert record["version"] == 0

        def placed() -> dict[str, str] | None:
            placement = {p.instance: p.worker for p in admin.status(fqn) if p.worker_alive}
            ok = len(placement) == 2 and len(set(placement.values())) == 2
            return placement if ok else None

        placement = wait_until(
            placed, timeout_s=120, interval_s=0.5, message="two instances placed"
        )
        # both instances run: each is a consumer on both partitions (failover)
        both = sorted([f"{fqn}:0", f"{fqn}:1"] * 2)
        wait_until(
            lambda: subscription_consumers(pulsar_endpoint, source, fqn) == both,
            timeout_s=120,
            interval_s=0.5,
            message="both instances subscribed",
        )
        outputs = client.subscribe(
            config["output"], "check", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer(source)
        lines = [f"alpha beta w{i % 7}" for i in range(60)]
        for line in lines[:30]:
            producer.send(line.encode())
        wait_until(
            lambda: state.get("counter/alpha", latest=True).result(60) == 30,
            timeout_s=120,
            interval_s=0.5,
            message="first half counted",
        )

        victim = placement[f"{fqn}:0"]
        os.kill(processes[victim].pid, signal.SIGKILL)
        processes[victim].join(30)
        for line in lines[30:]:
            producer.send(line.encode())

        moved = wait_until(
            lambda: (p := placed()) and victim not in p.values() and p,
            timeout_s=120,
            interval_s=0.5,
            message="the killed worker's instance moved to a live worker",
        )
        assert moved[f"{fqn}:1"] == placement[f"{fqn}:1"]  # the other one stayed
        wait_until(
            lambda: subscription_consumers(pulsar_endpoint, source, fqn) == both,
            timeout_s=120,
            interval_s=0.5,
            message="the moved instance runs on its new worker",
        )
        wait_until(
            lambda: state.get("counter/alpha", latest=True).result(60) == 60,
            timeout_s=180,
            interval_s=0.5,
            message="every line counted after the kill",
        )
        assert_counted_exactly(state.items(latest=True).result(60), lines, outputs)
        producer.close()
        outputs.close()
    finally:
        state.close()
        for process in processes.values():
            if process.is_alive():
                process.terminate()  # SIGTERM: the worker stops its instances and leaves
        for process in processes.values():
            process.join(60)
    survivors = [p for w, p in processes.items() if w != victim]
    assert all(p.exitcode == 0 for p in survivors), [p.exitcode for p in survivors]
