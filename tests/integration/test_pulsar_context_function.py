"""A function written for Pulsar, unchanged, with shared effectively-once state
(issue #17, item 2), read back with querystate (item 1).

The function is Pulsar's word-count example logic: a ``pulsar.Function`` whose
``process`` calls ``context.incr_counter(word, 1)`` per word. It is packaged
as it is (``build_function_package`` of the file), deployed with the
distribution's ``pulsar-admin`` through the
:class:`~pulsar_state.functions.pulsar_context.SharedStateFunction` entry point,
parallelism 2 with ``--retain-ordering`` (a failover subscription: each of
the input's two partitions has one active instance), one instance killed
while sentences flow. The counts end exact, read with ``pulsar-state
functions querystate`` and with the real ``pulsar-admin functions querystate``
against ``pulsar-state serve``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, function_instance_pids, unique_name, wait_until

from pulsar_state import PulsarMap
from pulsar_state.deploy.function_package import build_function_package
from pulsar_state.deploy.function_ready import DeployedFunction
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli

ENTRY_POINT = str(Path(sys.executable).parent / "pulsar-state")

#: Pulsar's word-count example, as a Pulsar user writes it: nothing of this project
WORD_COUNT = """
from pulsar import Function


class WordCountFunction(Function):
    def process(self, input, context):
        for word in input.split():
            context.incr_counter(word, 1)
        return input + "!"
"""

WORDS = ["apple", "banana", "cherry", "date", "elder", "fig"]


def _env(ep: PulsarEndpoint) -> dict[str, str]:
    return {**os.environ, "PULSAR_SERVICE_URL": ep.service_url, "PULSAR_ADMIN_URL": ep.admin_url}


def _querystate(ep: PulsarEndpoint, fqn: tuple[str, str, str], key: str) -> dict[str, Any]:
    tenant, namespace, name = fqn
    done = subprocess.run(
        [
            ENTRY_POINT,
            "functions",
            "querystate",
            "--tenant",
            tenant,
            "--namespace",
            namespace,
            "--name",
            name,
            "--key",
            key,
        ],
        env=_env(ep),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    state: dict[str, Any] = json.loads(done.stdout)
    return state


def _partition_consumers(ep: PulsarEndpoint, topic: str, subscription: str) -> list[int]:
    """Consumers of ``subscription`` on each partition of ``topic`` (the summed
    partitioned stats merge equal consumer lists, so ask per partition)."""
    path = topic.removeprefix("persistent://")
    stats = ep.admin("GET", f"/admin/v2/persistent/{path}/partitioned-stats?perPartition=true")
    stats.raise_for_status()
    partitions = stats.json()["partitions"]
    return [
        len(partitions[p]["subscriptions"].get(subscription, {}).get("consumers", []))
        for p in sorted(partitions)
    ]


@pytest.fixture
def serve(pulsar_endpoint: PulsarEndpoint) -> Iterator[str]:
    proc = subprocess.Popen(
        [ENTRY_POINT, "serve", "--port", "0"],
        env=_env(pulsar_endpoint),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        found = re.search(r"http://127\.0\.0\.1:\d+", proc.stdout.readline())
        assert found, "pulsar-state serve did not say where it listens"
        yield found.group(0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.timeout(900)
def test_pulsars_word_count_runs_unchanged_with_exact_shared_counts(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path, serve: str
) -> None:
    user_file = tmp_path / "word_count_example.py"
    user_file.write_text(WORD_COUNT)
    name = unique_name("pwc")
    package = build_function_package(name=name, entry=user_file, out_dir=tmp_path / "dist")
    fqn = ("public", "default", name)
    source = f"persistent://public/default/{name}-in"
    state_topic = f"persistent://public/default/{name}-state"
    created = pulsar_endpoint.admin(
        "PUT", f"/admin/v2/persistent/public/default/{name}-in/partitions", json=2
    )
    assert created.status_code in (200, 204), created.text
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    user_config = {
        "userClass": "word_count_example.WordCountFunction",
        "stateTopic": state_topic,
        "adminUrl": pulsar_endpoint.admin_url,
    }
    admin.create_function(
        fqn=fqn,
        py=package,
        classname="pulsar_state.functions.pulsar_context.SharedStateFunction",
        inputs=[source],
        output=f"persistent://public/default/{name}-out",
        extra=[
            "--retain-ordering",
            "--parallelism",
            "2",
            "--subs-position",
            "Earliest",
            "--user-config",
            json.dumps(user_config),
        ],
    )
    try:
        with DeployedFunction(admin_url=pulsar_endpoint.admin_url, fqn=fqn) as function:
            function.wait_ready(inputs=[source], instances=2, timeout_s=240)
            # failover: both instances on both partitions, one active on each
            function.wait_for(
                lambda: (
                    _partition_consumers(pulsar_endpoint, source, function.subscription) == [2, 2]
                ),
                what="two consumers on each of the two partitions",
                timeout_s=120,
            )
        sentences = [
            " ".join(WORDS[(i + j) % len(WORDS)] for j in range(i % 4 + 1)) for i in range(80)
        ]
        expected = Counter(word for s in sentences for word in s.split())
        producer = client.create_producer(source, batching_enabled=False)
        for sentence in sentences[:30]:
            producer.send(sentence.encode())
        first_half = Counter(word for s in sentences[:30] for word in s.split())
        wait_until(
            lambda: (
                _querystate(pulsar_endpoint, fqn, "apple")["numberValue"] == first_half["apple"]
            ),
            timeout_s=180,
            interval_s=1,
            message="the first 30 sentences counted",
        )
        # the rest flows while one instance is killed
        sent = [producer.send_async(s.encode(), None) for s in sentences[30:]]
        assert len(sent) == 50
        pids = function_instance_pids(name)
        if len(pids) == 2:
            os.kill(pids[0], signal.SIGKILL)  # the worker starts it again, in its time
            wait_until(
                lambda: not _running(pids[0]),
                timeout_s=30,
                interval_s=0.2,
                message=f"the killed instance process {pids[0]} gone",
            )
        else:  # the worker runs elsewhere: have it stop and start instance 0
            admin.run(
                "functions",
                "restart",
                "--tenant",
                "public",
                "--namespace",
                "default",
                "--name",
                name,
                "--instance-id",
                "0",
            )
        producer.flush()
        with PulsarMap[str, Any](client, state_topic, admin_url=pulsar_endpoint.admin_url) as state:

            def counts() -> dict[str, int]:
                entries = state.items(latest=True).result(timeout=60)
                return {
                    k.removeprefix("counter/"): v
                    for k, v in entries.items()
                    if k.startswith("counter/")
                }

            wait_until(
                lambda: counts() == dict(expected),
                timeout_s=300,
                interval_s=1,
                message=f"exact counts {dict(expected)} after the kill",
            )
        # read back as Pulsar users do: querystate, ours and the real pulsar-admin
        for word in WORDS:
            answer = _querystate(pulsar_endpoint, fqn, word)
            assert answer["key"] == word and answer["numberValue"] == expected[word]
            assert answer["version"] > 0
        real = PulsarAdminCli(admin_url=serve)
        for word in WORDS[:2]:
            printed = real.run(
                "functions",
                "querystate",
                "--tenant",
                "public",
                "--namespace",
                "default",
                "--name",
                name,
                "--key",
                word,
            )
            assert json.loads(printed)["numberValue"] == expected[word]
    finally:
        admin.delete_function(fqn)


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a killed child the worker has not reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(") ", 1)[1][:1] != "Z"
    except (FileNotFoundError, IndexError):
        return False
