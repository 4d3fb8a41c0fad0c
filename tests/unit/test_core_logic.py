"""Pure logic of the state core: positions, config, retry, serdes, wire format."""

from __future__ import annotations

import json

import pytest

from pulsar_state import (
    ConfigurationError,
    JsonSerde,
    Position,
    RetryPolicy,
    StateConfig,
    StrKeySerde,
    StrSerde,
)
from pulsar_state.cluster.admin import topic_path
from pulsar_state.core.log.format import (
    COMMIT_KEY,
    EPOCH_KEY,
    commit_message,
    epoch_message,
    epoch_of,
    message_epoch,
    op_message,
    parse_commit,
)
from pulsar_state.core.op_codec import SerializerCodec
from pulsar_state.errors import StateTopicError
from pulsar_state.map.op import MapCodec, MapOp
from pulsar_state.position import START


def test_positions_order_and_round_trip() -> None:
    a, b, c = Position(3, 1, 0), Position(3, 1, 2), Position(4, 0, -1)
    assert a < b < c
    assert Position.parse(str(b)) == b
    assert Position.parse(b) is b
    with pytest.raises(ValueError):
        Position.parse("nope")
    with pytest.raises(TypeError):
        Position.parse(42)  # type: ignore[arg-type]


def test_covers_handles_batches_and_the_start() -> None:
    assert Position(1, 1, 0).covers(START)
    assert Position(1, 1, 2).covers(Position(1, 1, 2))
    assert not Position(1, 1, 1).covers(Position(1, 1, 2))
    assert Position(1, 2, -1).covers(Position(1, 1, 5))
    assert Position(1, 1, 0).covers(Position(1, 1, -1))  # a whole non-batched entry
    assert not Position(1, 0, 9).covers(Position(1, 1, -1))


def test_config_is_validated_eagerly() -> None:
    with pytest.raises(ConfigurationError):
        StateConfig(access_mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        StateConfig(on_invalid_message="ignore")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        StateConfig(max_write_bytes=10)
    with pytest.raises(ConfigurationError):
        StateConfig(send_timeout_s=0)
    with pytest.raises(TypeError):
        StateConfig("fencing")  # type: ignore[misc]  # keyword-only
    for switch in ("read_compacted", "ensure_retention", "commit_on_ack"):
        # a string such as "no" is truthy: it must not silently mean True
        with pytest.raises(ConfigurationError, match=switch):
            StateConfig(**{switch: "no"})  # type: ignore[arg-type]
    with pytest.warns(DeprecationWarning, match="direct_writes"):
        StateConfig(direct_writes=False)  # the direct path is gone: a no-op
    assert StateConfig(access_mode="wait").effective_idle_release_s == 0.05
    assert StateConfig().effective_idle_release_s == 0.05  # adaptive queues too
    assert StateConfig(access_mode="fencing").effective_idle_release_s is None


def test_keyed_recipes_keep_a_compaction_threshold_under_a_custom_config() -> None:
    # a config chosen for other knobs must not turn automatic compaction off
    custom = StateConfig(ensure_retention=False).with_default_compaction(1024)
    assert custom.compaction_threshold_bytes == 1024
    assert custom.ensure_retention is False
    # an explicit choice wins, 0 (off) included
    assert StateConfig(compaction_threshold_bytes=0).with_default_compaction(1024) == StateConfig(
        compaction_threshold_bytes=0
    )


def test_retry_policy_backoff_and_exhaustion() -> None:
    slept: list[float] = []
    policy = RetryPolicy(
        max_attempts=3, initial_backoff_s=0.1, max_backoff_s=0.3, jitter=0, sleep=slept.append
    )
    assert [policy.backoff_s(n) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.3, 0.3]
    assert not policy.exhausted(2, started=float("inf"))
    assert policy.exhausted(3, started=float("inf"))
    assert RetryPolicy(deadline_s=1).exhausted(1, started=-1e9)
    jittered = RetryPolicy(initial_backoff_s=1, max_backoff_s=1, jitter=1)
    assert all(0 <= jittered.backoff_s(1) <= 1 for _ in range(100))
    with pytest.raises(ConfigurationError):
        RetryPolicy(jitter=2)
    with pytest.raises(ConfigurationError):
        RetryPolicy(max_attempts=0)


def test_serdes() -> None:
    serde: JsonSerde[object] = JsonSerde()
    assert serde.serialize({"b": 1, "a": [1, 2]}) == b'{"a":[1,2],"b":1}'
    assert serde.deserialize(b'{"a":1}') == {"a": 1}
    with pytest.raises(TypeError):
        serde.serialize(object())
    with pytest.raises(ValueError):
        serde.serialize(float("nan"))
    with pytest.raises(ValueError):
        serde.deserialize(b"\xff")
    with pytest.raises(TypeError):
        StrSerde().serialize(b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        StrKeySerde().to_key(1)  # type: ignore[arg-type]


def test_wire_format_messages() -> None:
    op = op_message("w1", 0, "k", b"v", epoch=7)
    assert op.key == "k" and op.properties["pss.k"] == "op" and message_epoch(op.properties) == 7
    keyless = op_message("w1", 3, None, b"v", epoch=7)
    assert keyless.key == "__pss__/op/w1/3"
    with pytest.raises(ValueError):
        op_message("w1", 0, None, b"", epoch=7)  # a keyless tombstone would vanish
    with pytest.raises(ValueError, match="reserved"):
        op_message("w1", 0, "__pss__/x", b"v", epoch=7)
    commit = commit_message("w1", 2, 7, keep=False)
    assert commit.key == COMMIT_KEY
    parsed = parse_commit(commit.payload)
    assert (parsed.write_id, parsed.count, parsed.epoch, parsed.members) == ("w1", 2, 7, ("w1",))
    assert commit_message("w1", 2, 7, keep=True).key == f"{COMMIT_KEY}/w1"
    assert epoch_message("wr", 1, keep=False).key == EPOCH_KEY
    assert epoch_message("wr", 1, keep=True).key == f"{EPOCH_KEY}/wr/1"
    with pytest.raises(ValueError):
        parse_commit(b"[]")
    assert message_epoch({"pss.e": "junk"}) == 0
    assert epoch_of(2, 0) > epoch_of(1, 2**31)


def test_map_codec_round_trip_and_repair() -> None:
    codec: MapCodec[str, object] = MapCodec(StrKeySerde(), JsonSerde())
    put = MapOp("k", {"a": 1}, b'{"a":1}')
    assert codec.encode(put) == ("k", b'{"a":1}')
    assert codec.encode(MapOp("k", MapOp.DELETE)) == ("k", b"")
    decoded = codec.decode("k", b'{"a":1}')
    assert decoded.key == "k" and decoded.value == {"a": 1}
    assert codec.decode("k", b"").is_delete
    repaired = codec.repair({"a": 1}, {"a", "gone"})
    assert [(op.key, op.is_delete) for op in repaired] == [("a", False), ("gone", True)]


def test_serializer_codec_requires_bytes() -> None:
    codec = SerializerCodec(json.dumps, json.loads)  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="bytes"):
        codec.encode(1)


@pytest.mark.parametrize(
    ("topic", "path"),
    [
        ("name", "persistent/public/default/name"),
        ("persistent://t/ns/x", "persistent/t/ns/x"),
    ],
)
def test_topic_path(topic: str, path: str) -> None:
    assert topic_path(topic) == path


@pytest.mark.parametrize(
    "topic", ["non-persistent://t/ns/x", "persistent://t/x", "persistent://t/ns/x-partition-0"]
)
def test_bad_topics_are_refused(topic: str) -> None:
    with pytest.raises(StateTopicError):
        topic_path(topic)


def test_an_unreachable_admin_api_is_one_clear_retriable_error() -> None:
    from pulsar_state import AdminUnreachableError, PulsarStateError  # noqa: PLC0415
    from pulsar_state.cluster.admin import PulsarAdmin  # noqa: PLC0415

    admin = PulsarAdmin("http://127.0.0.1:1", timeout_s=0.2, retry_s=0.5)
    with pytest.raises(AdminUnreachableError, match="did not answer") as caught:
        admin.stats("persistent://public/default/t")
    assert isinstance(caught.value, PulsarStateError)
    assert caught.value.retriable
