"""Garbage on a live state topic, then compaction: nothing acknowledged is lost.

A foreign producer takes the topic over (``ExclusiveWithFencing``, as any
writer may) and publishes messages under the map's own keys: one without the
format property, one with the format property and an undecodable payload.
Readers skip and count them; since compaction keeps the *last* message of each
key, the writer re-asserts the real values of the keys they touched, so a
bootstrap from the compacted view still sees every acknowledged value.
"""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from fault_report import FaultReport
from harness import PulsarEndpoint, compact_topic, unique_topic, wait_until

from pulsar_state import PulsarMap


def _inject_garbage(client: pulsar.Client, topic: str) -> int:
    producer = client.create_producer(
        topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing
    )
    try:
        producer.send(b"not ours", partition_key="a")
        bad_op = {"pss": "1", "pss.k": "op", "pss.w": "bad", "pss.e": "1"}
        producer.send(b"\xff\xfe", properties=bad_op, partition_key="b")
        bad_commit = {"pss": "1", "pss.k": "commit", "pss.w": "bad", "pss.e": "1"}
        producer.send(b"{not json", properties=bad_commit)
        producer.send(b"keyless garbage")
    finally:
        producer.close()
    return 4


@pytest.mark.fencing
def test_garbage_under_user_keys_survives_compaction_without_loss(
    broker_endpoint: PulsarEndpoint, make_client: Any, fault_report: FaultReport
) -> None:
    admin_url = broker_endpoint.admin_url
    topic = unique_topic("garbage")
    expected = {"a": 1, "b": 2, "c": 3}
    with PulsarMap[str, int](make_client(), topic, admin_url=admin_url) as m:
        for key in ("a", "b"):
            m.put(key, expected[key]).result(60)
        injected = _inject_garbage(make_client(), topic)
        # the next write regains the topic and re-asserts the keys the garbage touched
        m.put("c", 3).result(60)
        assert m.items(latest=True).result(60) == expected
        wait_until(lambda: not m.manager._tailer.stale_keys, message="keys repaired")
        skipped = m.manager.invalid_messages
    assert skipped >= 3
    compact_topic(admin_url, topic)
    with PulsarMap[str, int](make_client(), topic, admin_url=admin_url) as fresh:
        assert fresh.items().result() == expected
        assert fresh.items(latest=True).result(60) == expected
    fault_report.add(
        test="garbage under user keys + compaction",
        ops=3,
        ok=3,
        unknown=0,
        failed=0,
        faults=f"1x foreign takeover, {injected} bad messages",
        takeovers="-",
        violations=0,
        lost=0,
        note=f"garbage: {skipped} messages skipped and counted by the writer's reader",
    )


@pytest.mark.fencing
def test_a_forged_epoch_cannot_stop_the_writers(
    broker_endpoint: PulsarEndpoint, make_client: Any, fault_report: FaultReport
) -> None:
    """A well-formed write claiming a future epoch (it came through no epoch
    marker) must not make every later legitimate write stale."""
    admin_url = broker_endpoint.admin_url
    topic = unique_topic("forged-epoch")
    with PulsarMap[str, int](make_client(), topic, admin_url=admin_url) as m:
        m.put("a", 1).result(60)
        producer = make_client().create_producer(
            topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing
        )
        huge = str(1 << 62)
        try:
            forged = {"pss": "1", "pss.k": "write", "pss.w": "forged-w", "pss.e": huge}
            producer.send(b"666", properties=forged, partition_key="a")
            forged_op = {"pss": "1", "pss.k": "op", "pss.w": "forged-g", "pss.e": huge}
            producer.send(b"777", properties=forged_op, partition_key="b")
            commit = b'{"w":"forged-g","ws":["forged-g"],"n":1,"e":%s}' % huge.encode()
            forged_commit = {"pss": "1", "pss.k": "commit", "pss.w": "forged-g", "pss.e": huge}
            producer.send(commit, properties=forged_commit, partition_key="__pss__/commit")
        finally:
            producer.close()
        # the writer regains the topic and its writes still count
        m.put("c", 3).result(60)
        m.update("a", lambda v: (v or 0) + 1).result(60)
        assert m.items(latest=True).result(60) == {"a": 2, "c": 3}
        assert m.manager.latest_epoch < (1 << 62)
        wait_until(lambda: not m.manager._tailer.stale_keys, message="keys repaired")
        skipped = m.manager.invalid_messages
    assert skipped >= 2
    with PulsarMap[str, int](make_client(), topic, admin_url=admin_url) as fresh:
        assert fresh.items(latest=True).result(60) == {"a": 2, "c": 3}
        fresh.put("d", 4).result(60)
    compact_topic(admin_url, topic)
    with PulsarMap[str, int](make_client(), topic, admin_url=admin_url) as compacted:
        assert compacted.items(latest=True).result(60) == {"a": 2, "c": 3, "d": 4}
    fault_report.add(
        test="forged future epoch",
        ops=4,
        ok=4,
        unknown=0,
        failed=0,
        faults="1x foreign takeover, 2 writes claiming epoch 2^62",
        takeovers="-",
        violations=0,
        lost=0,
        note=f"forged writes skipped and counted ({skipped} messages)",
    )
