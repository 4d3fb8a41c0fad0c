"""Columnar checkpoints of a map (issue 16, item 2), each shown on the real broker.

Every test compares the map a checkpoint bootstraps with what the topic itself
says (a map opened with ``checkpoints=False`` replays the topic).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pulsar
import pytest
from harness import compact_topic, unique_topic, wait_until
from prometheus_client import REGISTRY

from pulsar_state import BytesSerde, CheckpointPolicy, JsonSerde, PulsarMap, StateConfig
from pulsar_state.cluster.admin import PulsarAdmin
from pulsar_state.map.checkpoint.format import (
    Manifest,
    chunk_properties,
    encode_chunks,
    manifest_properties,
)
from pulsar_state.map.checkpoint.writer import KEEPER_SUBSCRIPTION
from pulsar_state.position import Position
from pulsar_state.topic_names import checkpoint_topic

ClientFactory = Callable[[], pulsar.Client]

#: checkpoints only when asked (the tests call checkpoint()), of any size
MANUAL = CheckpointPolicy(every_ops=10**9, min_keys=0, chunk_bytes=16 * 1024)


def _open(
    client: pulsar.Client, topic: str, admin_url: str, checkpoints: Any = MANUAL
) -> PulsarMap[str, Any]:
    return PulsarMap(client, topic, admin_url=admin_url, checkpoints=checkpoints)


def _replayed(client: pulsar.Client, topic: str, admin_url: str) -> dict[str, Any]:
    with _open(client, topic, admin_url, checkpoints=False) as m:
        assert m.manager.bootstrap_source == "topic"
        return m.items().result()


def _bad_checkpoints(topic: str) -> float:
    labels = {"topic": topic, "reason": "bad_checkpoint"}
    return REGISTRY.get_sample_value("pulsar_state_invalid_messages_total", labels) or 0.0


def _forge_checkpoint(client: pulsar.Client, topic: str, chunk: bytes, at: Position) -> None:
    """A hand-made checkpoint of one chunk (``chunk``: its payload) at ``at``."""
    producer = client.create_producer(checkpoint_topic(topic), batching_enabled=False)
    try:
        chunk_at = producer.send(chunk, properties=chunk_properties("forged", 0, None))
        manifest = Manifest(
            id="forged", position=at, epoch=0, rows=1, chunks=(Position.from_message_id(chunk_at),)
        )
        producer.send(manifest.to_json(), properties=manifest_properties("forged"))
    finally:
        producer.close()


def _load(m: PulsarMap[str, Any], n: int, prefix: str = "k") -> dict[str, Any]:
    expected = {f"{prefix}{i}": {"i": i, "pad": "x" * (i % 50)} for i in range(n)}
    items = list(expected.items())
    for at in range(0, n, 500):
        m.put_all(dict(items[at : at + 500])).result(timeout=60)
    return expected


def test_bootstrap_is_the_checkpoint_plus_the_raw_tail(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Deletes after the checkpoint stay deleted even once compaction dropped them:
    the tail is read raw (a compacted tail would resurrect them)."""
    topic = unique_topic("ckpt")
    with _open(make_client(), topic, admin_url) as m:
        expected = _load(m, 3000)
        manifest = m.checkpoint().result(timeout=60)
        assert manifest.rows == 3000 and len(manifest.chunks) > 5
        for i in range(0, 300, 3):  # after the checkpoint: deletes, overwrites, new keys
            m.delete(f"k{i}").result(timeout=30)
            del expected[f"k{i}"]
            m.put(f"k{i + 1}", "changed").result(timeout=30)
            expected[f"k{i + 1}"] = "changed"
            m.put(f"new{i}", i).result(timeout=30)
            expected[f"new{i}"] = i
    compact_topic(admin_url, topic)  # the deleted keys vanish from the compacted view
    with _open(make_client(), topic, admin_url) as m:
        assert m.manager.bootstrap_source == "checkpoint"
        assert m.items().result() == expected
        # the tail only (300 writes: 100 deletes of 2 messages, 200 puts, markers),
        # not the 3000 keys' messages
        assert m.manager.messages_read <= 420
        m.put("after", 1).result(timeout=30)  # and it writes on
        assert m.get("after", latest=True).result(timeout=30) == 1
        expected["after"] = 1
    assert _replayed(make_client(), topic, admin_url) == expected


def test_bytes_values_and_an_empty_map(make_client: ClientFactory, admin_url: str) -> None:
    topic = unique_topic("ckpt-bytes")
    with PulsarMap[str, bytes](
        make_client(), topic, admin_url=admin_url, value_serde=BytesSerde(), checkpoints=MANUAL
    ) as m:
        empty = m.checkpoint().result(timeout=60)
        assert empty.rows == 0 and empty.chunks == ()
        values = {f"b{i}": bytes([i % 256]) * (i % 7 + 1) for i in range(2000)}
        m.put_all(values).result(timeout=60)
        m.checkpoint().result(timeout=60)
    with PulsarMap[str, bytes](
        make_client(), topic, admin_url=admin_url, value_serde=BytesSerde(), checkpoints=MANUAL
    ) as m:
        assert m.manager.bootstrap_source == "checkpoint"
        assert m.items().result() == values


def test_a_checkpoint_cut_short_falls_back_to_the_one_before(
    make_client: ClientFactory, admin_url: str
) -> None:
    """A writer that died between its chunks and its manifest: the reader goes back
    to the manifest the orphan chunks name; with none, it replays the topic."""
    topic = unique_topic("ckpt-cut")
    client = make_client()
    producer = client.create_producer(checkpoint_topic(topic), batching_enabled=False)
    ((orphan, _),) = encode_chunks([("ghost", b"1")], chunk_bytes=4096, compression=None)
    # a first checkpoint cut short: a chunk, no manifest, nothing before it
    producer.send(orphan, properties=chunk_properties("dead1", 0, None))
    with _open(make_client(), topic, admin_url) as m:
        assert m.manager.bootstrap_source == "topic"
        expected = _load(m, 1200)
        first = m.checkpoint().result(timeout=60)
        m.put("late", 1).result(timeout=30)
        expected["late"] = 1
    manifest_at = m.manager.checkpointer.last  # type: ignore[union-attr]
    assert manifest_at is first
    # a second checkpoint cut short: orphan chunks naming the first one's manifest
    previous = _manifest_position(client, topic)
    for index in range(3):
        producer.send(orphan, properties=chunk_properties("dead2", index, previous))
    producer.close()
    with _open(make_client(), topic, admin_url) as m:
        assert m.manager.bootstrap_source == "checkpoint"
        assert m.manager.checkpointer.last.id == first.id  # type: ignore[union-attr]
        assert m.items().result() == expected
        assert "ghost" not in expected


def _manifest_position(client: pulsar.Client, topic: str) -> Any:
    from pulsar_state.map.checkpoint.read import find_manifest  # noqa: PLC0415

    found = find_manifest(client, topic, 10_000)
    assert found is not None
    return found[1]


def test_an_undecodable_checkpoint_is_counted_and_the_topic_replayed(
    make_client: ClientFactory, admin_url: str
) -> None:
    topic = unique_topic("ckpt-bad")
    with _open(make_client(), topic, admin_url) as m:
        expected = _load(m, 1500)
    with _open(make_client(), topic, admin_url, checkpoints=False) as m:
        at = m.manager.position
    _forge_checkpoint(make_client(), topic, b"not arrow", at)  # no Arrow stream
    before = _bad_checkpoints(topic)
    with _open(make_client(), topic, admin_url) as m:
        assert m.manager.bootstrap_source == "topic"
        assert m.items().result() == expected
    assert _bad_checkpoints(topic) == before + 1


def test_a_recreated_topic_ignores_the_old_topics_checkpoint(
    make_client: ClientFactory, admin_url: str
) -> None:
    topic = unique_topic("ckpt-recreated")
    with _open(make_client(), topic, admin_url) as m:
        _load(m, 1200, prefix="old")
        m.checkpoint().result(timeout=60)
    admin = PulsarAdmin(admin_url)
    try:
        admin.delete_topic(topic)  # the state topic only: its checkpoints stay
    finally:
        admin.close()
    with _open(make_client(), topic, admin_url) as m:
        assert m.manager.bootstrap_source == "topic"
        m.put("new", 1).result(timeout=30)
    with _open(make_client(), topic, admin_url) as m:  # now the topic has messages
        assert m.manager.bootstrap_source == "topic"
        assert m.items().result() == {"new": 1}


def test_the_holder_checkpoints_by_itself_and_the_keeper_holds_the_newest(
    make_client: ClientFactory, admin_url: str
) -> None:
    topic = unique_topic("ckpt-auto")
    policy = CheckpointPolicy(every_ops=400, min_keys=0, chunk_bytes=8 * 1024, min_interval_s=0)
    with _open(make_client(), topic, admin_url, checkpoints=policy) as m:
        expected = {}
        checkpointer = m.manager.checkpointer
        assert checkpointer is not None
        # one write at a time, a checkpoint due every 400 ops; one that comes
        # due while the previous one still runs waits for it, so write on
        # until the third has begun
        first: Future[Any] | None = None
        positions: list[Position] = []  # of each put, in order
        for i in range(4000):
            begun = checkpointer.written + checkpointer.busy
            if begun and first is None:
                first = checkpointer.running
            if i >= 1300 and begun >= 3:
                break
            expected[f"a{i % 700}"] = i
            positions.append(m.put(f"a{i % 700}", i).result(timeout=30))
        m.put("last", 0).result(timeout=60)
        expected["last"] = 0
        # the first was taken at the publish that made it due (400 ops and up
        # to a tenth more, drawn per holder), not some rounds of housekeeping
        # later: read from the position its manifest covers, not from how many
        # puts this loop made meanwhile (that count depends on the load)
        assert first is not None, "no checkpoint began by itself"
        manifest = first.result(timeout=60)
        assert manifest is not None
        taken_after = positions.index(manifest.position) + 1  # puts the first one covers
        due = checkpointer._due_every
        assert taken_after == due, (taken_after, due)
        wait_until(
            lambda: checkpointer.written >= 3 and not checkpointer.busy,
            timeout_s=60,
            message="three checkpoints written",
        )
        newest = checkpointer.last
        assert newest is not None
    admin = PulsarAdmin(admin_url)
    try:
        subs = admin.stats(checkpoint_topic(topic))["subscriptions"]
        # the keeper's backlog is the newest checkpoint: its chunks and manifest
        assert subs[KEEPER_SUBSCRIPTION]["msgBacklog"] == len(newest.chunks) + 1
        retention = admin.request(
            "GET", f"/admin/v2/persistent/{checkpoint_topic(topic).split('://')[1]}/retention"
        ).json()
        assert retention == {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    finally:
        admin.close()
    with _open(make_client(), topic, admin_url, checkpoints=policy) as m:
        assert m.manager.bootstrap_source == "checkpoint"
        assert m.items().result() == expected


def test_the_keeper_holds_the_newest_checkpoint_whoever_wrote_it(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Two holders' checkpoints interleave: the one whose manifest lands last
    (the newest, which readers use) sent its chunk first. The other holder,
    moving the keeper after its own manifest, moves it to the newest's first
    chunk: to its own, Pulsar could trim that chunk (the map would replay)."""
    topic = unique_topic("ckpt-keeper")
    client = make_client()
    with _open(client, topic, admin_url) as m:
        expected = _load(m, 50)
        at = m.manager.position
        serde = JsonSerde()
        ((chunk, rows),) = encode_chunks(
            [(k, serde.serialize(v)) for k, v in expected.items()],
            chunk_bytes=1 << 20,
            compression=None,
        )
        producer = client.create_producer(checkpoint_topic(topic), batching_enabled=False)
        try:
            # the other holder's chunk goes out first, then this holder's
            # whole checkpoint, then the other's manifest: the newest
            other_chunk = Position.from_message_id(
                producer.send(chunk, properties=chunk_properties("other", 0, None, at))
            )
            own = m.checkpoint().result(timeout=60)
            other = Manifest(
                id="other", position=at, epoch=own.epoch, rows=rows, chunks=(other_chunk,)
            )
            producer.send(other.to_json(), properties=manifest_properties("other"))
        finally:
            producer.close()
        checkpointer = m.manager.checkpointer
        assert checkpointer is not None
        checkpointer.keep_newest(own.chunks[0])  # this holder's move, after it
    admin = PulsarAdmin(admin_url)
    try:
        subs = admin.stats(checkpoint_topic(topic))["subscriptions"]
    finally:
        admin.close()
    # kept from the other's chunk: it, this holder's chunks and both manifests
    assert subs[KEEPER_SUBSCRIPTION]["msgBacklog"] == 1 + len(own.chunks) + 2
    with _open(make_client(), topic, admin_url) as m:
        assert m.manager.bootstrap_source == "checkpoint"
        assert m.manager.checkpointer.last.id == "other"  # type: ignore[union-attr]
        assert m.items().result() == expected


def test_holders_taking_turns_share_one_checkpoint_cadence(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Two processes' maps write to one topic, taking turns as its holder. Each
    applies every op, so each comes due every 400 ops; a holder that finds a
    checkpoint another took since its own count began uses that one instead of
    writing its own. Before, each wrote its own: twice the checkpoints."""
    topic = unique_topic("ckpt-turns")
    policy = CheckpointPolicy(every_ops=400, min_keys=0, chunk_bytes=8 * 1024, min_interval_s=0)
    ops = 2400
    with (
        _open(make_client(), topic, admin_url, checkpoints=policy) as a,
        _open(make_client(), topic, admin_url, checkpoints=policy) as b,
    ):
        expected = {}
        for turn in range(ops // 100):  # 100 writes each in turn
            m = a if turn % 2 == 0 else b
            for i in range(turn * 100, turn * 100 + 100):
                expected[f"k{i % 300}"] = i
                m.put(f"k{i % 300}", i).result(timeout=30)
        both = (a.manager.checkpointer, b.manager.checkpointer)
        assert both[0] is not None and both[1] is not None
        wait_until(lambda: not both[0].busy and not both[1].busy, message="checkpoints done")
        written = both[0].written + both[1].written
        skipped = both[0].skipped + both[1].skipped
        # one cadence: about ops / every_ops checkpoints in all (each writer
        # alone would write about that many: 6 each, 12 in all)
        assert 3 <= written <= ops // 400 + 2, (written, skipped)
        assert skipped >= 2, (written, skipped)
    with _open(make_client(), topic, admin_url, checkpoints=policy) as m:
        assert m.manager.bootstrap_source == "checkpoint"
        assert m.items().result() == expected


def test_a_checkpoint_the_compacted_topic_outgrew_is_passed_over(
    make_client: ClientFactory, admin_url: str
) -> None:
    """A checkpoint its holders stopped refreshing (they run with
    ``checkpoints=False``): once compaction has absorbed more entries after it
    than the map has keys, a map opening replays the compacted topic instead of
    reading the checkpoint and its whole raw tail. Before compaction, or with a
    short tail, the checkpoint is used."""
    topic = unique_topic("ckpt-outgrown")
    with _open(make_client(), topic, admin_url) as m:
        expected = _load(m, 100)
        m.checkpoint().result(timeout=60)
    with _open(make_client(), topic, admin_url, checkpoints=False) as writer:
        for i in range(400):  # 400 entries after the checkpoint, on its 100 keys
            expected[f"k{i % 100}"] = {"i": -i}
            writer.put(f"k{i % 100}", {"i": -i}).result(timeout=30)
    with _open(make_client(), topic, admin_url) as m:  # nothing compacted yet
        assert m.manager.bootstrap_source == "checkpoint"
        assert m.items().result() == expected
    compact_topic(admin_url, topic)
    with _open(make_client(), topic, admin_url) as m:
        assert m.manager.bootstrap_source == "topic"
        assert m.manager.checkpointer.passed_over == 1  # type: ignore[union-attr]
        assert m.items().result() == expected


def test_checkpoint_settings_are_checked(make_client: ClientFactory, admin_url: str) -> None:
    from pulsar_state import ConfigurationError  # noqa: PLC0415

    with pytest.raises(ConfigurationError, match="every_ops"):
        CheckpointPolicy(every_ops=0)
    with pytest.raises(ConfigurationError, match="compression"):
        CheckpointPolicy(compression="gzip")
    with pytest.raises(TypeError, match="checkpoints must be"):
        PulsarMap(make_client(), unique_topic("ckpt-x"), admin_url=admin_url, checkpoints="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="chunk_bytes"):
        PulsarMap(
            make_client(),
            unique_topic("ckpt-x"),
            admin_url=admin_url,
            config=StateConfig(max_write_bytes=64 * 1024),
            checkpoints=CheckpointPolicy(chunk_bytes=128 * 1024),
        )
    with (
        _open(make_client(), unique_topic("ckpt-off"), admin_url, checkpoints=False) as m,
        pytest.raises(ConfigurationError, match="keeps no checkpoints"),
    ):
        m.checkpoint()


def test_checkpoint_covers_every_write_acknowledged_before_the_call(
    make_client: ClientFactory, admin_url: str
) -> None:
    """While one checkpoint is being written, checkpoint() takes a new one after it
    (it returned the running one, taken before the put, until fixed)."""
    topic = unique_topic("ckpt-now")
    with _open(make_client(), topic, admin_url) as m:
        _load(m, 60_000)
        first = m.checkpoint()  # serializing 60k JSON values takes a while
        landed = m.put("x", 1).result(timeout=30)
        assert not first.done(), "the first checkpoint ended before the put: no race shown"
        manifest = m.checkpoint().result(timeout=120)
        assert manifest.position.covers(landed)
        assert first.result(timeout=120).id != manifest.id
    with _open(make_client(), topic, admin_url) as m:
        assert m.manager.bootstrap_source == "checkpoint"
        assert m.manager.messages_read <= 2  # nothing after the checkpoint but a marker
        assert m.get("x").result() == 1


class _PickleSerde:
    """A user's serde that raises its own error type on bad bytes."""

    def serialize(self, value: Any) -> bytes:
        import pickle  # noqa: PLC0415

        return pickle.dumps(value)

    def deserialize(self, data: bytes) -> Any:
        import pickle  # noqa: PLC0415

        return pickle.loads(data)


def test_a_value_the_serde_cannot_read_makes_a_bad_checkpoint_not_a_failed_open(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Any error reading a checkpoint means "replay the topic" (a pickle error
    escaped PulsarMap() until fixed)."""
    topic = unique_topic("ckpt-serde")
    client = make_client()
    with PulsarMap(
        client, topic, admin_url=admin_url, value_serde=_PickleSerde(), checkpoints=False
    ) as m:
        m.put("a", {"v": 1}).result(timeout=30)
        at = m.manager.position
    ((chunk, _),) = encode_chunks([("a", b"garbage")], chunk_bytes=4096, compression=None)
    _forge_checkpoint(client, topic, chunk, at)
    before = _bad_checkpoints(topic)
    with PulsarMap(
        make_client(), topic, admin_url=admin_url, value_serde=_PickleSerde(), checkpoints=MANUAL
    ) as m:
        assert m.manager.bootstrap_source == "topic"
        assert m.items().result() == {"a": {"v": 1}}
    assert _bad_checkpoints(topic) == before + 1


def test_a_chunk_with_a_broken_back_pointer_is_a_bad_checkpoint(
    make_client: ClientFactory, admin_url: str
) -> None:
    topic = unique_topic("ckpt-prev")
    with _open(make_client(), topic, admin_url) as m:
        expected = _load(m, 1200)
    client = make_client()
    producer = client.create_producer(checkpoint_topic(topic), batching_enabled=False)
    ((orphan, _),) = encode_chunks([("ghost", b"1")], chunk_bytes=4096, compression=None)
    props = chunk_properties("dead", 0, None)
    props["pss.cp.prev"] = "junk"
    producer.send(orphan, properties=props)
    producer.close()
    before = _bad_checkpoints(topic)
    with _open(make_client(), topic, admin_url) as m:
        assert m.manager.bootstrap_source == "topic"
        assert m.items().result() == expected
    assert _bad_checkpoints(topic) == before + 1


def test_a_holder_cut_short_points_back_to_the_newest_checkpoint_even_another_wrote(
    make_client: ClientFactory, admin_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B opened before A's checkpoint; B dies between its chunks and its manifest.
    Its orphan chunks must name A's manifest (they named none, and bootstrap replayed
    the whole topic, until fixed)."""
    from pulsar_state.map.checkpoint.writer import MapCheckpointer  # noqa: PLC0415

    topic = unique_topic("ckpt-two-holders")
    with _open(make_client(), topic, admin_url) as b:
        with _open(make_client(), topic, admin_url) as a:
            expected = _load(a, 1500)
            first = a.checkpoint().result(timeout=60)
        b.put("late", 1).result(timeout=30)
        expected["late"] = 1

        def dies(self: MapCheckpointer, producer: Any, manifest: Manifest) -> Position:
            raise RuntimeError("killed between the chunks and the manifest")

        monkeypatch.setattr(MapCheckpointer, "_publish_manifest", dies)
        with pytest.raises(RuntimeError, match="killed"):
            b.checkpoint().result(timeout=60)
    with _open(make_client(), topic, admin_url) as m:
        assert m.manager.bootstrap_source == "checkpoint"
        assert m.manager.checkpointer.last.id == first.id  # type: ignore[union-attr]
        assert m.items().result() == expected


def test_by_default_only_a_map_that_protects_its_topics_keeps_checkpoints(
    make_client: ClientFactory, admin_url: str
) -> None:
    """Without an admin URL (or with ensure_retention off) the checkpoint topic
    cannot get zero retention, so old checkpoints would pile up under the
    namespace's retention: no checkpoints unless asked for."""
    unprotected = StateConfig(ensure_retention=False)
    with PulsarMap(make_client(), unique_topic("ckpt-noadmin"), config=unprotected) as m:
        assert m.manager.checkpointer is None
    with PulsarMap(
        make_client(), unique_topic("ckpt-noretention"), admin_url=admin_url, config=unprotected
    ) as m:
        assert m.manager.checkpointer is None
    with PulsarMap(
        make_client(), unique_topic("ckpt-asked"), config=unprotected, checkpoints=True
    ) as m:
        assert m.manager.checkpointer is not None
    with PulsarMap(make_client(), unique_topic("ckpt-default"), admin_url=admin_url) as m:
        assert m.manager.checkpointer is not None


_OPEN_AND_WRITE = """
import sys
import pulsar
from pulsar_state import PulsarMap
client = pulsar.Client(sys.argv[1])
with PulsarMap(client, sys.argv[2], admin_url=sys.argv[3]) as m:
    m.put("k", "v").result(timeout=30)
    assert m.manager.checkpointer is not None, "checkpoints are on by default here"
    print("pyarrow imported:", "pyarrow" in sys.modules)
client.close()
"""


def test_opening_a_map_with_no_checkpoint_does_not_import_pyarrow(
    pulsar_endpoint: Any, admin_url: str
) -> None:
    """pyarrow costs about half a second and tens of MB to import: a process
    pays it when it reads or writes a checkpoint, not for opening a map."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _OPEN_AND_WRITE,
            pulsar_endpoint.service_url,
            unique_topic("cp-lazy"),
            admin_url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pyarrow imported: False" in done.stdout, done.stdout
