"""The scheduler function across a handover (issue #26, item 5): a deposed
instance's late assignment never lands after its successor's.

Two instances of :class:`SchedulerFunction` (each with its own client, so its
own writers, as two function instances have), driven with heartbeats as the
runtime drives them. Instance 0 renews a member, reads the members (w1 and
w2) and the records, and is held right before it publishes. Meanwhile w2's TTL
runs out and instance 1, now the active one, expires w2 and publishes
everything on w1. Then instance 0 goes on: its assignment (computed with w2)
must not land after instance 1's.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from types import SimpleNamespace
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_name, wait_until
from map_changes import instance_entries, replayed, states_by_write

from pulsar_state import PulsarMap
from pulsar_state.functions import scheduler_function
from pulsar_state.functions.scheduler_function import SchedulerFunction
from pulsar_state.map.watch import MapChange

TTL_S = 3


def _context(client: pulsar.Client, config: dict[str, Any], instance: int) -> Any:
    metrics: list[tuple[str, float]] = []
    return SimpleNamespace(
        get_user_config_value=config.get,
        get_function_tenant=lambda: "public",
        get_function_namespace=lambda: "default",
        get_function_name=lambda: "sched",
        get_instance_id=lambda: instance,
        get_pulsar_client=lambda: client,
        get_secret=lambda _key: None,
        get_logger=lambda: logging.getLogger(f"sched-{instance}"),
        record_metric=lambda name, value: metrics.append((name, value)),
        metrics=metrics,
    )


def _heartbeat(member: str) -> bytes:
    return json.dumps({"member": member, "ts": int(time.time() * 1000)}).encode()


@pytest.mark.timeout(300)
def test_a_deposed_instances_late_assignment_never_lands_after_its_successors(
    pulsar_endpoint: PulsarEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique_name("fsched")
    topic = {p: f"persistent://public/default/{name}-{p}" for p in ("md", "as", "mb")}
    config = {
        "metadataTopic": topic["md"],
        "assignmentTopic": topic["as"],
        "membersTopic": topic["mb"],
        "memberTtlSeconds": TTL_S,
        "adminUrl": pulsar_endpoint.admin_url,
    }

    def new_client() -> pulsar.Client:
        return pulsar.Client(
            pulsar_endpoint.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )

    # instance 0 is held in its publication (after reading) while armed
    real_publish = scheduler_function.publish_assignment
    held, release = threading.Event(), threading.Event()
    outcome: list[Any] = []

    def publish(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name != "instance-0-held":
            return real_publish(*args, **kwargs)
        held.set()
        release.wait(120)
        try:
            result = real_publish(*args, **kwargs)
        except Exception as exc:
            outcome.append(("refused", type(exc).__name__, str(exc)))
            raise
        outcome.append(("published", result))
        return result

    monkeypatch.setattr(scheduler_function, "publish_assignment", publish)
    clients = [new_client() for _ in range(3)]
    records = PulsarMap[str, Any](clients[2], topic["md"], admin_url=pulsar_endpoint.admin_url)
    view = PulsarMap[str, str](clients[2], topic["as"], admin_url=pulsar_endpoint.admin_url)
    changes: list[MapChange[str, str]] = []
    watch = view.watch(None, changes.append)
    first, second = SchedulerFunction(), SchedulerFunction()
    contexts = [_context(clients[i], config, i) for i in range(2)]
    record = {"fqn": "t/ns/a", "version": 0, "config": {"parallelism": 4, "className": "C"}}
    records.put("t/ns/a", record).result(60)

    def placement() -> dict[str, str]:
        return instance_entries(view.items(latest=True).result(timeout=60))

    try:
        first.process(_heartbeat("w1"), contexts[0])
        first.process(_heartbeat("w2"), contexts[0])
        assert sorted(placement().values()) == ["w1", "w1", "w2", "w2"]

        late = threading.Thread(
            target=first.process, args=(_heartbeat("w1"), contexts[0]), name="instance-0-held"
        )
        late.start()
        assert held.wait(60), "instance 0 did not reach its publication"
        time.sleep(TTL_S + 0.5)  # w2 sends nothing more: its TTL runs out
        second.process(_heartbeat("w1"), contexts[1])  # the successor: w2 expired
        successors = {f"t/ns/a:{i}": "w1" for i in range(4)}
        assert placement() == successors
        now = view.items(latest=True).result(timeout=60)
        wait_until(lambda: replayed(changes) == now, timeout_s=30, message="watch caught up")
        published = len(states_by_write(changes))  # instance 1's write is the last one seen

        release.set()
        late.join(60)
        assert not late.is_alive()
        final = placement()
        latest = view.items(latest=True).result(timeout=60)
        wait_until(lambda: replayed(changes) == latest, timeout_s=30, message="watch caught up")
    finally:
        release.set()
        watch.stop()
        for fn in (first, second):
            for opened in fn._maps.values():
                opened.close()
        records.close()
        view.close()
        for c in clients:
            c.close()

    assert final == successors, (
        f"instance 0's late write ({outcome}) landed after instance 1's: the assignment is "
        f"{final}, instance 1's was {successors}"
    )
    # what a reader of the map saw, write by write: nothing changed instance 1's after it
    states = states_by_write(changes)
    assert states[published - 1] == successors, states
    assert all(s == successors for s in states[published - 1 :]), states[published - 1 :]
    assert outcome and outcome[0][:2] == ("refused", "NotLeaderError"), outcome
    assert ("stale_assignments_refused", 1) in contexts[0].metrics
