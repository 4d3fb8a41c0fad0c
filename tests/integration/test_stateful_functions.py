"""The stateful-function kit on the real functions worker, deployed with pulsar-admin."""

from __future__ import annotations

import os
import signal
from collections import Counter
from importlib import resources
from pathlib import Path

import pulsar
import pytest
from harness import PulsarEndpoint, unique_name, wait_until

from pulsar_state import PulsarMap, StateConfig
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli


def _instance_pids(name: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "python_instance_main.py" in cmd and "--function_id" in cmd and name in cmd:
                pids.append(int(entry.name))
    return pids


def test_word_count_is_exact_across_an_instance_kill(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client
) -> None:
    if pulsar_endpoint.broker is None:
        pytest.skip("needs the embedded broker (kills a function instance process)")
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    name = unique_name("wc")
    fqn = ("public", "default", name)
    source = f"persistent://public/default/{name}-in"
    state_topic = f"persistent://public/default/{name}-state"
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
        wait_until(
            lambda: admin.function_status(fqn)["numRunning"] == 2,
            timeout_s=120,
            interval_s=1,
            message="two instances running",
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
            for pid in _instance_pids(name):  # the worker restarts killed instances
                os.kill(pid, signal.SIGKILL)
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

            # an update of the function (parallelism 2 -> 1) keeps the state exact
            admin.run(
                "functions",
                "update",
                "--tenant",
                "public",
                "--namespace",
                "default",
                "--name",
                name,
                "--parallelism",
                "1",
            )
            wait_until(
                lambda: admin.function_status(fqn)["numInstances"] == 1,
                timeout_s=120,
                interval_s=1,
                message="updated to one instance",
            )
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
    # deleting the function leaves its state readable
    with PulsarMap[str, object](client, state_topic, admin_url=pulsar_endpoint.admin_url) as state:
        assert state.get("counter/alpha").result() == 50
