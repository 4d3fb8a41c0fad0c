"""TopicView: a read-only replica of a state topic, on the real broker."""

from __future__ import annotations

import time
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_topic, wait_until

from pulsar_state import PulsarMap, StateTopicError, TopicNotFoundError
from pulsar_state.cluster.admin import PulsarAdmin, topic_path
from pulsar_state.core.log.view import TopicView
from pulsar_state.map.op import MapCodec, MapOp, apply_map_op
from pulsar_state.serde import JsonSerde, StrKeySerde


def _view(client: pulsar.Client, ep: PulsarEndpoint, topic: str) -> TopicView[Any, Any]:
    return TopicView[dict[str, Any], MapOp[str, Any]](
        client=client,
        topic=topic,
        codec=MapCodec(StrKeySerde(), JsonSerde()),
        initializer=dict,
        applier=apply_map_op,
        admin_url=ep.admin_url,
        timeout_s=30,
    )


def test_a_view_sees_what_the_map_sees_across_compaction_and_new_writes(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client
) -> None:
    topic = unique_topic("view")
    admin = PulsarAdmin(pulsar_endpoint.admin_url)
    try:
        with PulsarMap[str, Any](client, topic, admin_url=pulsar_endpoint.admin_url) as m:
            m.put_all({f"k{i}": i for i in range(30)}).result(30)
            for i in range(10):
                m.put(f"k{i}", {"round": 2}).result(30)
            m.delete("k3").result(30)
            admin.compact(topic)
            wait_until(
                lambda: admin.compaction_status(topic) == "SUCCESS",
                timeout_s=60,
                message="compaction of the map topic finished",
            )
            m.put("after", [1]).result(30)  # the raw tail beyond the compaction horizon
            m.delete("k4").result(30)
            expected = m.items(latest=True).result(30)

            with _view(client, pulsar_endpoint, topic) as view:
                assert view.catch_up() == expected
                m.put("live", "x").result(30)
                m.delete("k5").result(30)
                expected = m.items(latest=True).result(30)
                deadline = time.monotonic() + 30
                for state in view.follow(poll_s=0.1):
                    if state == expected:
                        break
                    assert time.monotonic() < deadline, "the view did not follow within 30 s"
    finally:
        admin.close()


def test_a_view_of_a_missing_topic_raises_and_creates_nothing(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client
) -> None:
    topic = unique_topic("view-missing")
    with pytest.raises(TopicNotFoundError, match=f"topic {topic} does not exist"):
        _view(client, pulsar_endpoint, topic)
    assert pulsar_endpoint.admin("GET", f"/admin/v2/{topic_path(topic)}/stats").status_code == 404
    other_ns = "persistent://public/no-such-namespace/x"
    with pytest.raises(TopicNotFoundError, match="does not exist"):
        _view(client, pulsar_endpoint, other_ns)


def test_a_view_refuses_a_partitioned_topic(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client
) -> None:
    topic = unique_topic("view-partitioned")
    created = pulsar_endpoint.admin("PUT", f"/admin/v2/{topic_path(topic)}/partitions", json=2)
    assert created.status_code in (200, 204), created.text
    with pytest.raises(StateTopicError, match="partitioned"):
        _view(client, pulsar_endpoint, topic)


def test_catching_up_reports_its_progress(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client
) -> None:
    """What the CLI's progress display of a big map's replay is fed."""
    topic = unique_topic("view-progress")
    with PulsarMap[str, Any](client, topic, admin_url=pulsar_endpoint.admin_url) as m:
        # 2,500 messages: a put_all of n keys is n op messages and one commit
        for start in range(0, 2499, 833):
            m.put_all({f"k{i}": i for i in range(start, start + 832)}).result(30)
        expected = m.items(latest=True).result(30)
    seen: list[int] = []
    with _view(client, pulsar_endpoint, topic) as view:
        assert view.catch_up(on_progress=seen.append) == expected
    assert seen == [1000, 2000], seen
