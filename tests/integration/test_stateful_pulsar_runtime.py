"""The stateful kit on Pulsar's own Python runtime (the embedded broker's functions
worker, deployed with pulsar-admin): the output of a message committed with its
state and sent again after a kill -9 (issue #26, item 2), and ``ATMOST_ONCE``
going on past a failed message (item 3)."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, function_instance_pids, unique_name, wait_until
from kit_outputs import counters, keep, read_outputs, wait_counted_and_answered

from pulsar_state import PulsarMap, StateConfig
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.functions.stateful import INPUT_MESSAGE_ID_PROPERTY, INPUT_TOPIC_PROPERTY

_PAUSING_FUNCTION = '''
"""Counts its inputs; the output is "<input>#<running total>". Pauses after
committing "m7" (before the runtime sends its output), once: the test kills it."""
import os
import time

from pulsar_state.functions.stateful import StatefulFunction


class PausingCount(StatefulFunction):
    def handle(self, input, state, context):
        state.incr_counter(input, 1)
        state.incr_counter("total", 1)
        return f"{input}#{state.get_counter('total')}"

    def process(self, input, context):
        output = super().process(input, context)
        flag = context.get_user_config_value("pauseFile")
        if input == "m7" and not os.path.exists(flag):
            open(flag, "w").close()
            time.sleep(600)
        return output
'''

_FAILING_FUNCTION = '''
"""Counts its inputs; raises on "boom", every time."""
from pulsar_state.functions.stateful import StatefulFunction


class FailingCount(StatefulFunction):
    def handle(self, input, state, context):
        if input == "boom":
            raise RuntimeError("boom")
        state.incr_counter(input, 1)
        state.incr_counter("total", 1)
'''


def _deploy(
    endpoint: PulsarEndpoint,
    tmp_path: Path,
    name: str,
    code: str,
    classname: str,
    *,
    guarantee: str,
    output: str | None = None,
    user_config: dict[str, str] | None = None,
) -> tuple[PulsarAdminCli, tuple[str, str, str]]:
    admin = PulsarAdminCli(admin_url=endpoint.admin_url)
    fqn = ("public", "default", name)
    module = classname.split(".", maxsplit=1)[0]
    (tmp_path / f"{module}.py").write_text(code)
    config = {
        "stateTopic": f"persistent://public/default/{name}-state",
        "adminUrl": endpoint.admin_url,
        **(user_config or {}),
    }
    admin.create_function(
        fqn=fqn,
        py=tmp_path / f"{module}.py",
        classname=classname,
        inputs=[f"persistent://public/default/{name}-in"],
        output=output,
        extra=[
            "--processing-guarantees",
            guarantee,
            "--retain-ordering",
            "--subs-position",
            "Earliest",
            "--user-config",
            json.dumps(config),
        ],
    )
    return admin, fqn


def _running(admin: PulsarAdminCli, fqn: tuple[str, str, str]) -> bool:
    instances = admin.function_status(fqn)["instances"]
    return len(instances) == 1 and bool(instances[0]["status"]["running"])


def test_an_output_is_sent_again_after_a_kill_between_commit_and_send(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    """Pulsar's runtime publishes what ``process`` returns, then acknowledges. The
    instance commits m7 and is SIGKILLed before that; the worker restarts it and
    m7 comes again: its committed output is sent (before: ``None``, no output)."""
    if pulsar_endpoint.broker is None or not pulsar_endpoint.functions:
        pytest.skip("needs the embedded broker's functions worker (kills an instance)")
    name = unique_name("kit-out")
    flag = tmp_path / "paused"
    output = f"persistent://public/default/{name}-out"
    keep(client, output)
    admin, fqn = _deploy(
        pulsar_endpoint,
        tmp_path,
        name,
        _PAUSING_FUNCTION,
        "pausing_count.PausingCount",
        guarantee="ATLEAST_ONCE",
        output=output,
        user_config={"pauseFile": str(flag)},
    )
    texts = [f"m{i}" for i in range(20)]
    try:
        wait_until(lambda: _running(admin, fqn), timeout_s=120, interval_s=1, message="running")
        producer = client.create_producer(
            f"persistent://public/default/{name}-in", batching_enabled=False
        )
        for text in texts:
            producer.send(text.encode())
        wait_until(flag.exists, timeout_s=120, message="m7 committed, the instance paused")
        (pid,) = function_instance_pids(name)
        os.kill(pid, signal.SIGKILL)
        with PulsarMap[str, Any](
            client,
            f"persistent://public/default/{name}-state",
            admin_url=pulsar_endpoint.admin_url,
            config=StateConfig(),
        ) as state:
            counts = wait_counted_and_answered(
                state,
                client,
                output,
                texts,
                timeout_s=240,
                interval_s=1,
                message="every input counted and answered after the restart",
            )
        outputs = read_outputs(client, output)
    finally:
        admin.delete_function(fqn)
    assert counts == {**dict.fromkeys(texts, 1), "total": len(texts)}, "one state effect each"
    copies: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
    for value, properties in outputs:
        copies[value.split("#")[0]].add(
            (value, properties[INPUT_TOPIC_PROPERTY], properties[INPUT_MESSAGE_ID_PROPERTY])
        )
    assert sorted(copies) == sorted(texts), "at least one output per input"
    assert all(len(seen) == 1 for seen in copies.values()), f"copies differ: {copies}"
    totals = sorted(int(next(iter(seen))[0].split("#")[1]) for seen in copies.values())
    assert totals == list(range(1, len(texts) + 1))


def test_at_most_once_goes_on_past_a_failed_message(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    """Under ``ATMOST_ONCE`` Pulsar's runtime acknowledges a message on receipt. The
    kit used to hold every message after a failed one until it came back, which
    it never does: the function stalled and the rest was lost. Now the failed
    message is skipped (a user exception in the status) and the others counted."""
    if not pulsar_endpoint.functions:
        pytest.skip("needs a functions worker")
    name = unique_name("kit-atmost")
    admin, fqn = _deploy(
        pulsar_endpoint,
        tmp_path,
        name,
        _FAILING_FUNCTION,
        "failing_count.FailingCount",
        guarantee="ATMOST_ONCE",
    )
    lines = [f"w{i % 4}" for i in range(30)]
    lines[14] = "boom"
    expected = dict(Counter(line for line in lines if line != "boom"))
    try:
        wait_until(lambda: _running(admin, fqn), timeout_s=120, interval_s=1, message="running")
        producer = client.create_producer(
            f"persistent://public/default/{name}-in", batching_enabled=False
        )
        for line in lines:
            producer.send(line.encode())
        with PulsarMap[str, Any](
            client,
            f"persistent://public/default/{name}-state",
            admin_url=pulsar_endpoint.admin_url,
            config=StateConfig(),
        ) as state:
            try:
                wait_until(
                    lambda: counters(state) == {**expected, "total": 29},
                    timeout_s=90,
                    interval_s=1,
                    message="the 29 other messages counted",
                )
            except AssertionError as exc:
                raise AssertionError(f"{exc}: counts {counters(state)}") from None
        status = admin.function_status(fqn)["instances"][0]["status"]
        assert status["numUserExceptions"] >= 1
    finally:
        admin.delete_function(fqn)
