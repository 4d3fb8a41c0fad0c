"""Issue #27: ``pulsar-state worker`` on the cluster with a token, through the
broker that does not own the function's topics, one worker killed.

The word count's topics (a 2-partition input, its output and its state) are in
a namespace of one bundle, so one broker owns them all; two ``pulsar-state
worker`` processes are given the other broker's service URL and admin URL and
the super-user's token, and the function gets the token as its ``adminToken``
secret (a worker's environment variable). The function is created with 2
instances, one on each worker; one worker is killed with ``kill -9`` while lines
are sent. What must hold: its instance moves to the other worker and runs there,
the other instance stays, every word is counted exactly once and every line has
one output naming its input; the surviving worker stops cleanly (exit 0).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulsar
import pytest
from cluster_access import QUIET
from harness import pulsar_state_cli, pulsar_state_worker, unique_name, wait_until
from token_broker import TokenBroker
from word_count_workers import assert_counted_exactly, subscription_consumers, word_count_config

from pulsar_state import PulsarMap
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.functions.function_admin import FunctionAdmin
from pulsar_state.functions.worker_config import WorkerTopics
from pulsar_state.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(900)

#: a dead worker's instances move after this (plus a heartbeat and a reconcile)
TTL_S = 4.0
VICTIM = "victim"
WORKER_COMMAND = (str(Path(sys.executable).parent / "pulsar-state"), "-v", "worker")


def test_word_count_on_two_workers_through_the_non_owner(
    local_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    token = local_cluster.superuser_token or ""
    first = TokenBroker.of(local_cluster, 0)
    namespace = f"public/{unique_name('wc')}"
    made = first.admin(
        "PUT", f"/admin/v2/namespaces/{namespace}", json={"bundles": {"numBundles": 1}}
    )
    assert made.status_code in (200, 204), made.text
    name = unique_name("wc")
    source = f"persistent://{namespace}/{name}-in"
    parted = first.admin("PUT", f"/admin/v2/persistent/{namespace}/{name}-in/partitions", json=2)
    assert parted.status_code in (200, 204), parted.text
    # the namespace's one bundle, and so every topic of the function, is on the owner
    elsewhere = 1 - first.owner_index(
        local_cluster, f"persistent/{namespace}/{name}-in-partition-0"
    )
    broker = TokenBroker.of(local_cluster, elsewhere)
    config = word_count_config(name, broker.admin_url, namespace)
    tenant, local = namespace.split("/")
    fqn = f"{namespace}/{name}"
    group = unique_name("wcg")
    # the workers' credentials, and the one the function's admin calls take
    worker_env = {"PULSAR_AUTH_TOKEN": token, "WC_ADMIN_TOKEN": token}
    victim_log = (tmp_path / "victim.log").open("w")
    victim = subprocess.Popen(
        [*WORKER_COMMAND, "--worker-id", VICTIM, "--member-ttl", str(TTL_S)],
        env={
            **os.environ,
            "PULSAR_SERVICE_URL": broker.service_url,
            "PULSAR_ADMIN_URL": broker.admin_url,
            "PULSAR_STATE_FUNCTIONS_GROUP": group,
            **worker_env,
        },
        stdout=victim_log,
        stderr=subprocess.STDOUT,
    )
    client = local_cluster.client(elsewhere, operation_timeout_seconds=60, logger=QUIET)
    state_endpoint = AdminEndpoint(
        url=broker.admin_url, headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with pulsar_state_worker(
            broker, group, tmp_path / "survivor.log", worker_env=worker_env, member_ttl_s=TTL_S
        ) as env:
            cli_env = {**env, "PULSAR_AUTH_TOKEN": token}
            admin = FunctionAdmin(client, WorkerTopics.of(group), timeout_s=60)
            wait_until(
                lambda: len(admin.members()) == 2,
                timeout_s=180,
                interval_s=1,
                message="two live workers",
            )
            create = ["functions", "create", "--tenant", tenant, "--namespace", local]
            create += ["--name", name, "--py", config["py"], "--classname", config["className"]]
            create += ["--inputs", source, "--output", config["output"], "--parallelism", "2"]
            create += ["--retain-ordering", "--subs-position", "Earliest"]
            create += ["--user-config", json.dumps(config["userConfig"])]
            create += ["--secrets", json.dumps({"adminToken": "WC_ADMIN_TOKEN"})]
            done = pulsar_state_cli(*create, "--timeout", "60", env=cli_env)
            assert f"Created {fqn} (version 0)" in done.stdout, done.stderr[-3000:]

            def placement() -> dict[str, str]:
                return {p.instance: p.worker for p in admin.status(fqn) if p.worker_alive}

            placed = wait_until(
                lambda: (p := placement()) and len(set(p.values())) == 2 and p,
                timeout_s=180,
                interval_s=1,
                message="two instances, one on each worker",
            )
            both = sorted([f"{fqn}:0", f"{fqn}:1"] * 2)
            wait_until(
                lambda: subscription_consumers(broker, source, fqn) == both,
                timeout_s=180,
                interval_s=1,
                message="both instances subscribed to both partitions",
            )
            outputs = client.subscribe(
                config["output"], "check", initial_position=pulsar.InitialPosition.Earliest
            )
            producer = client.create_producer(source)
            lines = [f"alpha beta w{i % 7}" for i in range(60)]
            with PulsarMap[str, Any](
                client, config["userConfig"]["stateTopic"], admin=state_endpoint
            ) as state:
                for line in lines[:30]:
                    producer.send(line.encode())
                wait_until(
                    lambda: state.get("counter/alpha", latest=True).result(60) == 30,
                    timeout_s=180,
                    interval_s=1,
                    message="first half counted",
                )
                moving = next(i for i, w in placed.items() if w == VICTIM)
                staying = next(i for i, w in placed.items() if w != VICTIM)
                victim.send_signal(signal.SIGKILL)
                assert victim.wait(30) == -signal.SIGKILL
                for line in lines[30:]:
                    producer.send(line.encode())
                moved = wait_until(
                    lambda: (p := placement()) and VICTIM not in p.values() and len(p) == 2 and p,
                    timeout_s=180,
                    interval_s=1,
                    message="the killed worker's instance moved to the other worker",
                )
                assert moved[moving] == moved[staying] == placed[staying]
                wait_until(
                    lambda: subscription_consumers(broker, source, fqn) == both,
                    timeout_s=180,
                    interval_s=1,
                    message="the moved instance runs on its new worker",
                )
                wait_until(
                    lambda: state.get("counter/alpha", latest=True).result(60) == 60,
                    timeout_s=240,
                    interval_s=1,
                    message="every line counted after the kill",
                )
                assert_counted_exactly(state.items(latest=True).result(60), lines, outputs)
            producer.close()
            outputs.close()
    finally:
        client.close()
        if victim.poll() is None:
            victim.kill()
            victim.wait(30)
        victim_log.close()
