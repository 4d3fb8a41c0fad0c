"""The scheduler as a deployed Pulsar Function, from its zip package, with pulsar-admin."""

from __future__ import annotations

import os
import signal
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import pulsar
import pytest
import yaml
from harness import PulsarEndpoint, function_instance_pids, unique_name, wait_until

from pulsar_state import PulsarMap
from pulsar_state.deploy.function_package import build_function_package
from pulsar_state.deploy.function_ready import DeployedFunction
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.functions.scheduler_function import (
    Heartbeat,
    HeartbeatError,
    SchedulerFunction,
    parse_heartbeat,
    wanted_instances,
)
from pulsar_state.functions.scheduler_member import SchedulerMember
from pulsar_state.scheduling.scheduler import LEADER_KEY

REPO = Path(__file__).resolve().parents[2]


def _record(fqn: str, parallelism: Any) -> dict[str, Any]:
    """A record as the metadata manager writes it."""
    return {"fqn": fqn, "version": 0, "config": {"parallelism": parallelism, "className": "C"}}


def test_heartbeats_and_records_are_checked() -> None:
    assert parse_heartbeat(b'{"member": "w1"}') == Heartbeat("w1", "heartbeat")
    leave = parse_heartbeat('{"member": "w1", "op": "leave", "ts": 5}')
    assert leave == Heartbeat("w1", "leave", 5)
    for bad in (
        b"nope",
        b"[]",
        b'{"member": ""}',
        b'{"member": "a/b"}',
        b'{"member": 3}',
        b'{"member": "w1", "ts": "soon"}',
    ):
        with pytest.raises(HeartbeatError):
            parse_heartbeat(bad)
    with pytest.raises(HeartbeatError, match="op"):
        parse_heartbeat(b'{"member": "w1", "op": "crash"}')
    skipped: list[str] = []
    wanted = wanted_instances(
        {
            "t/ns/a": _record("t/ns/a", 2),
            "t/ns/b": _record("t/ns/b", True),
            "t/ns/c": {"config": {}},
            "bad": _record("bad", 1),
        },
        lambda fqn, exc: skipped.append(fqn),
    )
    assert wanted == ["t/ns/a:0", "t/ns/a:1"]
    assert sorted(skipped) == ["bad", "t/ns/b", "t/ns/c"]


def test_members_expire_after_their_ttl(
    client: pulsar.Client, pulsar_endpoint: PulsarEndpoint
) -> None:
    topic = f"persistent://public/default/{unique_name('members')}"
    with PulsarMap[str, Any](client, topic, admin_url=pulsar_endpoint.admin_url) as members:

        def beat(member: str, op: str, ts: int | None, now: int) -> list[str]:
            return SchedulerFunction.beat(members, Heartbeat(member, op, ts), 1000, now_ms=now)

        assert beat("w1", "heartbeat", 0, now=0) == ["w1"]
        assert beat("w2", "heartbeat", 500, now=500) == ["w1", "w2"]
        # w1 was last heard of at 0: gone at 1001; w2 renews
        assert beat("w2", "heartbeat", 1001, now=1001) == ["w2"]
        # a redelivered older heartbeat renews nothing (w2 stays due at 2001)
        assert beat("w2", "heartbeat", 700, now=1900) == ["w2"]
        assert beat("w3", "heartbeat", 2002, now=2002) == ["w3"]
        # a leave; then a heartbeat sent before it, redelivered, does not bring w3 back
        assert beat("w3", "leave", 2100, now=2100) == []
        assert beat("w3", "heartbeat", 2050, now=2200) == []
        assert beat("w9", "leave", 2300, now=2300) == []  # never there: nothing recorded
        assert beat("w3", "heartbeat", 2400, now=2400) == ["w3"]  # it rejoins
        assert beat("w4", "heartbeat", 2500, now=2500) == ["w3", "w4"]
        assert beat("w4", "heartbeat", 3450, now=3450) == ["w4"]  # w3 was due at 3400
        # working off a backlog (a heartbeat sent long ago, e.g. after a failover)
        # expires nobody: w4 (due at 4450) may have newer heartbeats queued
        assert beat("w5", "heartbeat", 3000, now=4700) == ["w4", "w5"]
        # a fresh heartbeat (here one without a timestamp, hand-written) does
        assert beat("w6", "heartbeat", None, now=4800) == ["w5", "w6"]


@pytest.mark.timeout(900)
def test_deployed_scheduler_assigns_moves_and_survives_instance_kills(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    """Deployed (parallelism 2, from its zip) against members heartbeating from
    here: 3 instances on 2 members, a third member takes one with one move, a
    crashed member's work moves after its TTL, each scheduler instance is
    SIGKILLed in turn and scheduling goes on, a leaving member's work moves at
    once, a deleted record's instances go."""
    if pulsar_endpoint.broker is None:
        pytest.skip("needs the embedded broker (kills function instance processes)")
    name = unique_name("fsched")
    topic = {p: f"persistent://public/default/{name}-{p}" for p in ("hb", "md", "as", "mb")}
    config = yaml.safe_load((REPO / "deploy" / "functions" / "scheduler.yaml").read_text())
    config.update({"name": name, "inputs": [topic["hb"]]})
    config["userConfig"] = {
        "metadataTopic": topic["md"],
        "assignmentTopic": topic["as"],
        "membersTopic": topic["mb"],
        "memberTtlSeconds": 5,
        "adminUrl": pulsar_endpoint.admin_url,
    }
    config_file = tmp_path / f"{name}.yaml"
    config_file.write_text(yaml.safe_dump(config))
    entry = Path(str(resources.files("pulsar_state.functions") / "scheduler_entry.py"))
    package = build_function_package(name=name, entry=entry, out_dir=tmp_path)
    fqn = ("public", "default", name)
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    records = PulsarMap[str, Any](client, topic["md"], admin_url=pulsar_endpoint.admin_url)
    assignments = PulsarMap[str, str](client, topic["as"], admin_url=pulsar_endpoint.admin_url)
    records.put("t/ns/a", _record("t/ns/a", 3)).result(60)
    records.put("t/ns/broken", _record("t/ns/broken", "three")).result(60)  # skipped
    admin.create_function(fqn=fqn, config_file=config_file, py=package)
    members: dict[str, SchedulerMember] = {}

    def join(member_id: str) -> None:
        members[member_id] = SchedulerMember(
            client,
            member_id=member_id,
            heartbeat_topic=topic["hb"],
            assignment_topic=topic["as"],
            interval_s=0.5,
        )

    def placement() -> dict[str, str]:
        # the instances (the map also holds its fence, LEADER_KEY)
        everything = assignments.items(latest=True).result(60)
        return {i: m for i, m in everything.items() if i != LEADER_KEY}

    def balanced(instances: int, member_ids: set[str]) -> dict[str, str] | None:
        now = placement()
        loads = Counter(now.values())
        fair = {instances // len(member_ids), -(-instances // len(member_ids))}
        ok = len(now) == instances and set(loads) == member_ids and set(loads.values()) <= fair
        return now if ok else None

    def running(n: int) -> bool:
        return bool(admin.function_status(fqn)["numRunning"] == n)

    try:
        # as `pulsar-state deploy` waits: running, subscribed, a stuck instance restarted
        with DeployedFunction(admin_url=pulsar_endpoint.admin_url, fqn=fqn) as deployed:
            deployed.wait_ready(inputs=[topic["hb"]], instances=2, timeout_s=180)
        join("w1")
        join("w2")
        # a heartbeat that is not one is skipped; scheduling goes on
        bad = client.create_producer(topic["hb"])
        bad.send(b"not json")
        bad.close()
        before = wait_until(
            lambda: balanced(3, {"w1", "w2"}), timeout_s=120, message="3 instances on 2 members"
        )
        assert set(before) == {"t/ns/a:0", "t/ns/a:1", "t/ns/a:2"}
        join("w3")
        after = wait_until(
            lambda: balanced(3, {"w1", "w2", "w3"}), timeout_s=60, message="a third member"
        )
        assert sum(before[i] != after[i] for i in after) == 1  # minimal movement
        assert members["w3"].assignments() == [i for i, m in after.items() if m == "w3"]
        members.pop("w3").close(leave=False)  # a crash: its work moves after the TTL
        wait_until(lambda: balanced(3, {"w1", "w2"}), timeout_s=60, message="w3 expired")
        for parallelism in (4, 5):  # the lowest pid each time: both originals die
            pids = function_instance_pids(name)
            assert len(pids) == 2, pids
            os.kill(pids[0], signal.SIGKILL)
            records.put("t/ns/a", _record("t/ns/a", parallelism)).result(60)
            wait_until(
                lambda p=parallelism: balanced(p, {"w1", "w2"}),
                timeout_s=180,
                message=f"parallelism {parallelism} scheduled after a kill",
            )
            wait_until(lambda: running(2), timeout_s=180, interval_s=1, message="restarted")
        members.pop("w2").close()  # a clean leave moves its work at once (well within the TTL)
        wait_until(lambda: balanced(5, {"w1"}), timeout_s=4, message="w2 left")
        records.delete("t/ns/a").result(60)
        wait_until(lambda: placement() == {}, timeout_s=60, message="deleted record unscheduled")
    finally:
        for member in members.values():
            member.close()
        admin.delete_function(fqn)
        records.close()
        assignments.close()
