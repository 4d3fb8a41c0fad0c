"""Topic names: one module parses them and derives the companion topics."""

from __future__ import annotations

import pytest

from pulsar_state import ConfigurationError, InvalidTopicNameError, StateTopicError
from pulsar_state.topic_names import (
    TopicName,
    admin_path,
    full_topic_name,
    function_state_topic,
    members_topic,
    namespace_topic,
    parse_topic,
    partition_topic,
    partitioned_base,
    sessions_topic,
    snapshot_topic,
)


@pytest.mark.parametrize(
    ("given", "full"),
    [
        ("cfg", "persistent://public/default/cfg"),
        ("persistent://acme/prod/cfg", "persistent://acme/prod/cfg"),
    ],
)
def test_state_topics_are_fully_qualified(given: str, full: str) -> None:
    assert full_topic_name(given) == full


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("", "non-empty str"),
        (None, "non-empty str"),
        ("a/b", "persistent://tenant/namespace/name"),
        ("persistent://t/x", "persistent://tenant/namespace/name"),
        ("persistent://t//x", "persistent://tenant/namespace/name"),
        ("non-persistent://t/ns/x", "persistent://tenant/namespace/name"),
        ("persistent://t/ns/x-partition-0", "must not be a partition"),
    ],
)
def test_bad_state_topics_are_clear_configuration_errors(bad: object, says: str) -> None:
    with pytest.raises(InvalidTopicNameError, match=says) as caught:
        full_topic_name(bad)
    # callers that catch the older, broader classes keep working
    assert isinstance(caught.value, StateTopicError)
    assert isinstance(caught.value, ConfigurationError)
    assert isinstance(caught.value, ValueError)


def test_admin_paths_are_quoted_and_validated() -> None:
    assert admin_path("name") == "persistent/public/default/name"
    assert admin_path("persistent://t/ns/a b") == "persistent/t/ns/a%20b"
    with pytest.raises(InvalidTopicNameError):
        admin_path("persistent://t/ns/x-partition-3")


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        ("orders", TopicName("persistent", "public", "default", "orders")),
        ("acme/prod/orders", TopicName("persistent", "acme", "prod", "orders")),
        ("persistent://acme/prod/orders", TopicName("persistent", "acme", "prod", "orders")),
        ("non-persistent://acme/prod/x", TopicName("non-persistent", "acme", "prod", "x")),
    ],
)
def test_any_topic_parses(given: str, parsed: TopicName) -> None:
    assert parse_topic(given) == parsed
    assert parse_topic(parsed.full) == parsed


@pytest.mark.parametrize("bad", ["", "a/b", "a/b/c/d", "ftp://a/b/c", "persistent://a//c", 7])
def test_bad_topics_name_what_was_expected(bad: object) -> None:
    with pytest.raises(InvalidTopicNameError, match="sink 'topic' must be ") as caught:
        parse_topic(bad, what="sink 'topic'")
    expected = "a non-empty str" if bad in ("", 7) else "[persistent://]tenant/namespace/name"
    assert expected in str(caught.value)


def test_partitions() -> None:
    topic = "persistent://t/ns/in"
    assert parse_topic(f"{topic}-partition-2").partition_index == 2
    assert parse_topic(f"{topic}-partition-2").is_partition
    assert parse_topic(topic).partition_index is None
    assert not parse_topic(topic).is_partition
    assert partition_topic(topic, 0) == f"{topic}-partition-0"
    assert partition_topic(f"{topic}-partition-5", 1) == f"{topic}-partition-1"
    assert partitioned_base(f"{topic}-partition-5") == topic
    assert partitioned_base(topic) == topic
    with pytest.raises(InvalidTopicNameError, match="partition index"):
        partition_topic(topic, -1)


def test_companion_topics() -> None:
    topic = "persistent://t/ns/s"
    assert snapshot_topic(topic) == "persistent://t/ns/s-pss-snapshots"
    assert sessions_topic(topic) == "persistent://t/ns/s-pss-sessions"
    assert members_topic(topic) == "persistent://t/ns/s-members"
    assert function_state_topic("t", "ns", "wc") == "persistent://t/ns/wc-pss-state"
    assert namespace_topic("t", "ns", "function-metadata") == "persistent://t/ns/function-metadata"
    # every companion of a state topic is itself a valid state topic
    for companion in (snapshot_topic(topic), sessions_topic(topic), members_topic(topic)):
        assert full_topic_name(companion) == companion


@pytest.mark.parametrize(
    ("tenant", "namespace", "name", "says"),
    [
        ("", "ns", "x", "tenant"),
        ("t", "a/b", "x", "namespace"),
        ("t", "ns", " x", "name"),
        ("t", "ns", None, "name"),
    ],
)
def test_bad_parts_are_refused(tenant: str, namespace: str, name: str, says: str) -> None:
    with pytest.raises(InvalidTopicNameError, match=says):
        namespace_topic(tenant, namespace, name)
    with pytest.raises(InvalidTopicNameError):
        function_state_topic(tenant, namespace, name)
