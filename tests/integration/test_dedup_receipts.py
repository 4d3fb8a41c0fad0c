"""A receipt that names no position: the broker's answer to a duplicate (issue #25).

With deduplication on, a broker answers a message it stored already with the
position -1:-1 instead of the message's own: the C++ client resends what was
pending when its connection dropped before the receipt, and the broker
recognises the resend by its producer name and sequence id. The entry is
stored, but the writer cannot tell where; until the log says so, nothing may
be built on it (the lost update of defect 1 otherwise: a read-modify-write
decided on state that does not yet hold the put). The schedules with such a
receipt are explored by tests/unit/test_writer_model.py (``duplicate``); here
the real broker shows the receipt, and a map behind it keeps its writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import _pulsar
import pulsar
import pytest
import requests

from pulsar_state import PulsarMap
from pulsar_state.core.write.tenure import TenureState

ClientFactory = Callable[[], pulsar.Client]


@pytest.fixture
def dedup_namespace(admin_url: str) -> str:
    """A namespace of its own with deduplication on (the standalone's default is off)."""
    namespace = f"public/dedup-{uuid.uuid4().hex[:8]}"
    base = f"{admin_url}/admin/v2/namespaces/{namespace}"
    requests.put(base, json={}, timeout=30).raise_for_status()
    requests.post(f"{base}/deduplication", json=True, timeout=30).raise_for_status()
    return namespace


def test_the_broker_answers_a_resent_message_at_no_position(
    make_client: ClientFactory, dedup_namespace: str
) -> None:
    """The premise: a resend with the sequence id of a stored message is
    acknowledged, at -1:-1, and not stored again."""
    client = make_client()
    topic = f"persistent://{dedup_namespace}/premise"
    producer = client.create_producer(topic, producer_name="premise", batching_enabled=False)
    first = producer.send(b"v", sequence_id=7)
    again = producer.send(b"v", sequence_id=7)
    assert first.ledger_id() >= 0 and first.entry_id() >= 0
    assert (again.ledger_id(), again.entry_id()) == (-1, -1)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.read_next(10_000).data() == b"v"
    with pytest.raises(pulsar.Timeout):
        reader.read_next(1_000)  # stored once


class _ResendsOnce:
    """The writer's native producer, whose next blocking send is stored and
    then resent with the same sequence id: the writer sees only the resend's
    receipt (-1:-1), as when the first receipt was lost with the connection."""

    def __init__(self, native: Any) -> None:
        self._native = native
        self.armed = True
        self.receipts: list[tuple[int, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._native, name)

    def send(self, message: Any) -> Any:
        if not self.armed:
            return self._native.send(message)
        self.armed = False
        stored = self._native.send(message)
        builder = _pulsar.MessageBuilder()
        builder.content(message.data())
        builder.properties(message.properties())
        builder.partition_key(message.partition_key())
        builder.deliver_at(0)  # alone, as the entry sender sends a one-message entry
        builder.sequence_id(self._native.last_sequence_id())
        resent = self._native.send(builder.build())
        self.receipts = [
            (stored.ledger_id(), stored.entry_id()),
            (resent.ledger_id(), resent.entry_id()),
        ]
        return resent


def test_a_put_acknowledged_as_a_duplicate_is_settled_before_an_update(
    make_client: ClientFactory, admin_url: str, dedup_namespace: str
) -> None:
    """The put lands once and succeeds; the update queued behind it is built
    on state that holds it (6, not 2); the writer went in doubt and settled
    the put from the log; a fresh map reads the same. (Whether the update
    would outrun the tail without the rule is a race; the writer model finds
    that lost update, and here the writer never going in doubt fails.)"""
    topic = f"persistent://{dedup_namespace}/map"
    m = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    try:
        m.put("k", 1).result(timeout=30)
        tenure = m.manager._writer.tenure
        producer = tenure.producer
        assert producer is not None
        resends = _ResendsOnce(producer._producer)
        producer._producer = resends
        put = m.put("k", 5)
        update = m.update("k", lambda v: (v or 0) + 1)
        put.result(timeout=60)
        assert update.result(timeout=60) == 6
        assert resends.receipts[1] == (-1, -1) and resends.receipts[0][0] >= 0
        assert any(to is TenureState.IN_DOUBT for _, to in tenure.history)
        assert m.get("k", latest=True).result(timeout=30) == 6
    finally:
        m.close()
    with PulsarMap[str, int](make_client(), topic, admin_url=admin_url) as fresh:
        assert fresh.get("k", latest=True).result(timeout=30) == 6
