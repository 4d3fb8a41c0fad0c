"""The stateful-function kit on the real functions worker, deployed with pulsar-admin."""

from __future__ import annotations

import os
import signal
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, function_instance_pids, unique_name, wait_until

from pulsar_state import PulsarMap, StateConfig
from pulsar_state.deploy.function_ready import DeployedFunction
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli


def _instances(admin: PulsarAdminCli, fqn: tuple[str, str, str]) -> dict[int, dict[str, Any]]:
    """instance id -> its status, from ``pulsar-admin functions status``."""
    return {i["instanceId"]: i["status"] for i in admin.function_status(fqn)["instances"]}


def _all_running(admin: PulsarAdminCli, fqn: tuple[str, str, str], n: int) -> bool:
    instances = _instances(admin, fqn)
    return sorted(instances) == list(range(n)) and all(s["running"] for s in instances.values())


def _partition_consumers(endpoint: PulsarEndpoint, topic: str, subscription: str) -> list[int]:
    """Consumers of the function's subscription on each partition of ``topic``."""
    path = topic.removeprefix("persistent://")
    stats = endpoint.admin(
        "GET", f"/admin/v2/persistent/{path}/partitioned-stats?perPartition=true"
    )
    if stats.status_code == 404:  # the topic was deleted (inactive): no consumer
        return []
    stats.raise_for_status()
    partitions = stats.json()["partitions"]
    return [
        len(partitions[p]["subscriptions"].get(subscription, {}).get("consumers", []))
        for p in sorted(partitions)
    ]


def test_word_count_is_exact_across_an_instance_kill(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client
) -> None:
    """One function through its life with pulsar-admin: create (parallelism 2 on a
    2-partition input), an instance SIGKILLed, ``functions update`` to 1, delete.
    Counters stay exact and the instance assignment stays right at every step."""
    if pulsar_endpoint.broker is None:
        pytest.skip("needs the embedded broker (kills a function instance process)")
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    name = unique_name("wc")
    fqn = ("public", "default", name)
    source = f"persistent://public/default/{name}-in"
    state_topic = f"persistent://public/default/{name}-state"
    subscription = f"public/default/{name}"  # the functions runtime's default
    created = pulsar_endpoint.admin(
        "PUT", f"/admin/v2/persistent/public/default/{name}-in/partitions", json=2
    )
    assert created.status_code in (200, 204), created.text
    admin.create_function(
        fqn=fqn,
        py=Path(str(resources.files("pulsar_state.functions") / "wordcount_entry.py")),
        classname="wordcount_entry.WordCount",
        inputs=[source],
        output=f"persistent://public/default/{name}-out",
        extra=[
            "--processing-guarantees",
            "ATLEAST_ONCE",
            "--retain-ordering",
            "--parallelism",
            "2",
            "--user-config",
            f'{{"stateTopic": "{state_topic}", "adminUrl": "{pulsar_endpoint.admin_url}"}}',
        ],
    )
    try:
        # as `pulsar-state deploy` waits: running, subscribed, a stuck instance restarted
        with DeployedFunction(admin_url=pulsar_endpoint.admin_url, fqn=fqn) as deployed:
            deployed.wait_ready(inputs=[source], instances=2, timeout_s=180)
        # failover on each partition: both instances attached, one active per partition
        wait_until(
            lambda: _partition_consumers(pulsar_endpoint, source, subscription) == [2, 2],
            timeout_s=120,
            interval_s=1,
            message="two consumers on each partition",
        )
        producer = client.create_producer(source)
        lines = [f"alpha beta w{i % 5}" for i in range(40)]
        for line in lines[:20]:
            producer.send(line.encode())
        with PulsarMap[str, object](
            client, state_topic, admin_url=pulsar_endpoint.admin_url, config=StateConfig()
        ) as state:
            wait_until(
                lambda: state.get("counter/alpha", latest=True).result() == 20,
                timeout_s=120,
                message="first half counted",
            )
            killed = function_instance_pids(name)
            assert len(killed) == 2
            os.kill(killed[0], signal.SIGKILL)  # one instance; the worker restarts it
            for line in lines[20:]:
                producer.send(line.encode())
            expected = Counter(word for line in lines for word in line.split())
            wait_until(
                lambda: state.get("counter/alpha", latest=True).result() == 40,
                timeout_s=180,
                interval_s=0.5,
                message="all lines counted after the kill",
            )
            counts = {
                k.removeprefix("counter/"): v
                for k, v in state.items(latest=True).result().items()
                if k.startswith("counter/")
            }
            assert counts == dict(expected)  # nothing lost, nothing counted twice
            assert state.get("state/last").result() is not None
            # the killed instance came back as a new process; still instances 0 and 1
            wait_until(
                lambda: (
                    _all_running(admin, fqn, 2)
                    and len(pids := function_instance_pids(name)) == 2
                    and killed[0] not in pids
                    and killed[1] in pids
                ),
                timeout_s=120,
                interval_s=1,
                message="the killed instance restarted, the other untouched",
            )
            restarts = sum(s["numRestarts"] for s in _instances(admin, fqn).values())
            assert restarts >= 1

            # an update of the function (parallelism 2 -> 1) keeps the state exact
            admin.update_parallelism(fqn, 1)
            wait_until(
                lambda: (
                    admin.function_status(fqn)["numInstances"] == 1 and _all_running(admin, fqn, 1)
                ),
                timeout_s=120,
                interval_s=1,
                message="updated to one running instance (id 0)",
            )
            wait_until(
                lambda: _partition_consumers(pulsar_endpoint, source, subscription) == [1, 1],
                timeout_s=120,
                interval_s=1,
                message="one consumer left on each partition",
            )
            assert len(function_instance_pids(name)) == 1
            more = [f"alpha gamma w{i}" for i in range(10)]
            for line in more:
                producer.send(line.encode())
            expected.update(word for line in more for word in line.split())
            wait_until(
                lambda: state.get("counter/alpha", latest=True).result() == 50,
                timeout_s=180,
                interval_s=0.5,
                message="counted after the update",
            )
            assert state.get("counter/gamma").result() == 10
    finally:
        admin.delete_function(fqn)
    # deleted: not listed, no instance process, no consumer left
    listed = admin.run("functions", "list", "--tenant", "public", "--namespace", "default")
    assert name not in listed.split()
    wait_until(lambda: not function_instance_pids(name), timeout_s=60, message="instances gone")
    wait_until(
        lambda: sum(_partition_consumers(pulsar_endpoint, source, subscription)) == 0,
        timeout_s=60,
        message="no consumer on the input",
    )
    # deleting the function leaves its state readable
    with PulsarMap[str, object](client, state_topic, admin_url=pulsar_endpoint.admin_url) as state:
        assert state.get("counter/alpha").result() == 50


_FLAKY_FUNCTION = '''
"""Word count whose process raises on a line with the word "boom", twice per message."""
from pulsar_state.functions.stateful import StatefulFunction


class FlakyCount(StatefulFunction):
    attempts: dict[str, int] = {}

    def handle(self, input, state, context):
        if "boom" in input.split():
            key = str(context.get_message_id())
            self.attempts[key] = self.attempts.get(key, 0) + 1
            if self.attempts[key] <= 2:
                raise RuntimeError(f"boom, attempt {self.attempts[key]}")
        for word in input.split():
            state.incr_counter(word, 1)
'''


@pytest.mark.parametrize("partitions", [0, 2])
def test_a_failed_message_is_not_skipped_when_it_comes_back(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path, partitions: int
) -> None:
    """process raises on the 10th message (twice); the runtime nacks it and goes on.
    No later message may be recorded past it: the counts end exact, "boom" once. On a
    non-partitioned input, and on 2 partitions consumed by one instance."""
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    name = unique_name("flaky")
    fqn = ("public", "default", name)
    source = f"persistent://public/default/{name}-in"
    state_topic = f"persistent://public/default/{name}-state"
    code = tmp_path / "flaky_count.py"
    code.write_text(_FLAKY_FUNCTION)
    if partitions:
        created = pulsar_endpoint.admin(
            "PUT", f"/admin/v2/persistent/public/default/{name}-in/partitions", json=partitions
        )
        assert created.status_code in (200, 204), created.text
    admin.create_function(
        fqn=fqn,
        py=code,
        classname="flaky_count.FlakyCount",
        inputs=[source],
        extra=[
            "--retain-ordering",
            "--user-config",
            f'{{"stateTopic": "{state_topic}", "adminUrl": "{pulsar_endpoint.admin_url}"}}',
        ],
    )
    try:
        wait_until(
            lambda: _all_running(admin, fqn, 1),
            timeout_s=120,
            interval_s=1,
            message="the instance running",
        )
        producer = client.create_producer(source, batching_enabled=False)
        lines = [f"alpha w{i % 4}" for i in range(30)]
        lines[9] = "alpha boom"
        for line in lines:
            producer.send(line.encode())
        expected = dict(Counter(word for line in lines for word in line.split()))
        with PulsarMap[str, object](
            client, state_topic, admin_url=pulsar_endpoint.admin_url, config=StateConfig()
        ) as state:

            def counts() -> dict[str, object]:
                items = state.items(latest=True).result(timeout=30)
                return {
                    k.removeprefix("counter/"): v
                    for k, v in items.items()
                    if k.startswith("counter/")
                }

            try:
                wait_until(
                    lambda: counts() == expected,
                    timeout_s=90,
                    interval_s=1,
                    message="every line counted once, the failed one included",
                )
            except AssertionError as exc:
                raise AssertionError(f"{exc}: counts {counts()} != {expected}") from None
        status = _instances(admin, fqn)[0]
        assert status["numUserExceptions"] >= 2  # the two failures of "alpha boom"
    finally:
        admin.delete_function(fqn)
