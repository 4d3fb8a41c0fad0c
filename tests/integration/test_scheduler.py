"""Membership and scheduling on the real broker: assignments follow members."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pulsar
import pytest
from harness import PulsarEndpoint, unique_topic, wait_until

from pulsar_state import MetadataStore, PulsarMap
from pulsar_state.scheduling.scheduler import Scheduler


@pytest.fixture
def group(pulsar_endpoint: PulsarEndpoint) -> Iterator[list[Scheduler]]:
    meta_topic, assign_topic = unique_topic("sched-meta"), unique_topic("sched-assign")
    clients, schedulers = [], []
    for i in range(3):
        client = pulsar.Client(
            pulsar_endpoint.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        store = MetadataStore(
            client,
            meta_topic,
            admin_url=pulsar_endpoint.admin_url,
            session_timeout_s=2.0,
            session_check_interval_s=0.5,
        )
        assignments = PulsarMap[str, str](client, assign_topic, admin_url=pulsar_endpoint.admin_url)
        clients.append(client)
        schedulers.append(Scheduler(store, assignments, member_id=f"w{i}").start())
    yield schedulers
    for s in schedulers:
        s.close()
        s.assignments.close()
        s.store.close()
    for c in clients:
        c.close()


def test_assignments_follow_members(group: list[Scheduler]) -> None:
    a, b, _ = group
    wait_until(lambda: sum(s.is_leader for s in group) == 1, timeout_s=30, message="one leader")
    a.set_function("public/default/f", 5)
    b.set_function("public/default/g", 1)

    def loads(members: list[Scheduler]) -> Counter[str]:
        return Counter({s.member_id: len(s.my_assignments()) for s in members})

    wait_until(lambda: sorted(loads(group).values()) == [2, 2, 2], timeout_s=60)
    before = {i: s.member_id for s in group for i in s.my_assignments()}
    assert len(before) == 6
    leader = next(s for s in group if s.is_leader)
    leaving = next(s for s in group if s is not leader)
    leaving.close()
    leaving.store.close()  # its session ends: its member node goes
    rest = [s for s in group if s is not leaving]
    wait_until(lambda: sorted(loads(rest).values()) == [3, 3], timeout_s=60)
    after = {i: s.member_id for s in rest for i in s.my_assignments()}
    moved = {i for i in before if before[i] != after.get(i)}
    assert moved == {i for i, m in before.items() if m == leaving.member_id}  # minimal movement
    a.remove_function("public/default/g")
    wait_until(lambda: sum(loads(rest).values()) == 5, timeout_s=60)


def test_a_deposed_leader_campaigns_again(group: list[Scheduler]) -> None:
    wait_until(lambda: sum(s.is_leader for s in group) == 1, timeout_s=30, message="one leader")
    for round_ in range(2):
        leader = next(s for s in group if s.is_leader)
        # depose it: its lock node goes (as when an operator or a session expiry removes it)
        leader.store.delete(f"{leader.root}/leader").result(timeout=60)
        wait_until(
            lambda: sum(s.is_leader for s in group) == 1, timeout_s=30, message="a new leader"
        )
        # whoever leads now schedules
        leader.set_function(f"public/default/f{round_}", 3)
        wait_until(
            lambda r=round_: (
                sum(
                    1
                    for s in group
                    for i in s.my_assignments()
                    if i.startswith(f"public/default/f{r}:")
                )
                == 3
            ),
            timeout_s=60,
            message="assigned by the new leader",
        )
    # with every other member gone, the deposed ones still lead: nobody stopped campaigning
    for s in group[1:]:
        s.close()
        s.store.close()
    wait_until(lambda: group[0].is_leader, timeout_s=60, message="the last member leads")
