"""The Spark source's broker calls live through a topic unload.

A clean-clone CI run lost a streaming query this way: its trigger asked for the
topic's last position (``latestOffset``) while the test unloaded the topic, and
the query died with "cannot reach ...: Pulsar error: TimeOut" after 30 s. The
cause is in the C++ client under ``pulsar-client``: a consumer (or reader)
whose first SUBSCRIBE is answered "Topic is temporarily unavailable" (the
topic is closing for the unload) schedules a reconnection, which it then skips
because the connection it sent SUBSCRIBE on is still set ("Ignoring
reconnection request since we're already connected"), so the creation waits
out the whole operation timeout. An unload every 50 ms makes that happen
within seconds; a bundle move, a broker restart or a load-balancer shedding
the topic make it happen to a long-running query sooner or later.

What users get now: a task's opening has a bounded share of ``timeoutMs`` and
is tried again on a new client, so a stalled subscribe costs a part of the
budget, not the query. The planner asks the admin API (``lastMessageId``): it
made a short-lived subscription before, and one whose subscribe the client gave
up on could still be made on the broker after its removal (a clean-clone CI run
found ``pss-spark-*`` left on the topic); a read leaves nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulsar
import pytest
import requests
from harness import PulsarEndpoint, range_rows, unique_topic, unload_storm

from pulsar_state import PulsarMap
from pulsar_state.cluster.admin import topic_path
from pulsar_state.connectors.spark_options import SourceOptions
from pulsar_state.position import Position

STORM_S = 8.0


def _during_storm(admin_url: str, topic: str, call: Callable[[], Any]) -> list[Any]:
    """``call()`` again and again while a storm of STORM_S seconds lasts (the last
    call may end after it: each has a budget longer than the storm)."""
    results: list[Any] = []
    with unload_storm(admin_url, topic, for_s=STORM_S) as over:
        while not over.is_set():
            results.append(call())
    return results


def _map_with_keys(
    endpoint: PulsarEndpoint, client: pulsar.Client, admin_url: str, prefix: str
) -> SourceOptions:
    """A map of five keys, and the source options that read it (timeoutMs longer
    than the storm)."""
    topic = unique_topic(prefix)
    with PulsarMap[str, int](client, topic, admin_url=admin_url) as m:
        for i in range(5):
            m.put(f"k{i}", i).result(60)
    return SourceOptions.parse(
        {
            "serviceUrl": endpoint.service_url,
            "adminUrl": admin_url,
            "topic": topic,
            "timeoutMs": str(int(STORM_S * 1000 * 1.5)),
        }
    )


def _subscriptions(admin_url: str, topic: str) -> list[str]:
    stats = requests.get(f"{admin_url}/admin/v2/{topic_path(topic)}/stats", timeout=30)
    stats.raise_for_status()
    return sorted(stats.json().get("subscriptions", {}))


def test_the_planners_last_position_lives_through_an_unload_storm(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, admin_url: str
) -> None:
    opts = _map_with_keys(pulsar_endpoint, client, admin_url, "unload-planner")
    before = opts.last_position()
    subscribed = set(_subscriptions(admin_url, opts.topic))
    # before: ConnectionError "cannot reach ...: Pulsar error: TimeOut" within seconds
    seen = _during_storm(admin_url, opts.topic, opts.last_position)
    assert seen and all(isinstance(p, Position) for p in seen)
    assert set(seen) == {before}
    assert set(_subscriptions(admin_url, opts.topic)) == subscribed, "planner subscriptions left"


def test_a_range_read_lives_through_an_unload_storm(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, admin_url: str
) -> None:
    """The planner's question and a task's reader, the whole read, again and again;
    the old code's single retry of an opening mostly survived this storm, its
    planner did not."""
    opts = _map_with_keys(pulsar_endpoint, client, admin_url, "unload-range")
    expected = range_rows(opts)
    assert [key for key, _, _ in expected] == [f"k{i}" for i in range(5)]
    assert all(
        got == expected for got in _during_storm(admin_url, opts.topic, lambda: range_rows(opts))
    )


def test_the_planners_question_creates_nothing(
    pulsar_endpoint: PulsarEndpoint, admin_url: str
) -> None:
    """A consumer's subscribe would have made the topic (auto-creation) and a
    subscription on it; the admin API's read makes neither."""
    topic = unique_topic("planner-missing")
    opts = SourceOptions.parse(
        {"serviceUrl": pulsar_endpoint.service_url, "adminUrl": admin_url, "topic": topic}
    )
    with pytest.raises(ValueError, match="does not exist"):
        opts.last_position()
    gone = requests.get(f"{admin_url}/admin/v2/{topic_path(topic)}/stats", timeout=30)
    assert gone.status_code == 404
