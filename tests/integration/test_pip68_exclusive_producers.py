"""PIP-68 access modes on the real broker: what the state core's fencing relies on."""

from __future__ import annotations

import threading
import time

import pulsar
import pytest
from harness import unique_topic
from pulsar import ProducerAccessMode


def _read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(timeout_millis=10_000).data())
        return out
    finally:
        reader.close()


def test_second_exclusive_producer_is_fenced(client: pulsar.Client) -> None:
    topic = unique_topic("excl")
    holder = client.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
    holder.send(b"still-mine")
    assert _read_all(client, topic) == [b"still-mine"]


def test_shared_producer_next_to_exclusive_is_busy(client: pulsar.Client) -> None:
    topic = unique_topic("busy")
    client.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, access_mode=ProducerAccessMode.Shared)


def test_wait_for_exclusive_gets_access_when_holder_closes(client: pulsar.Client) -> None:
    topic = unique_topic("wait")
    holder = client.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
    acquired: dict[str, pulsar.Producer] = {}

    def wait() -> None:
        acquired["p"] = client.create_producer(
            topic, access_mode=ProducerAccessMode.WaitForExclusive
        )

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    time.sleep(1.0)
    assert "p" not in acquired, "WaitForExclusive must queue while another holds the topic"
    holder.send(b"first")
    holder.close()
    waiter.join(timeout=30)
    assert "p" in acquired, "the waiting producer never got access"
    acquired["p"].send(b"second")
    assert _read_all(client, topic) == [b"first", b"second"]


@pytest.mark.fencing
def test_exclusive_with_fencing_takes_over_and_old_sends_never_land(
    client: pulsar.Client,
) -> None:
    topic = unique_topic("fence")
    old = client.create_producer(
        topic, access_mode=ProducerAccessMode.Exclusive, send_timeout_millis=5_000
    )
    old.send(b"old-before")
    new = client.create_producer(topic, access_mode=ProducerAccessMode.ExclusiveWithFencing)
    new.send(b"new-1")
    # The broker closes the fenced producer; its sends fail (this client reports
    # ProducerFenced, AlreadyClosed or a send timeout, depending on timing).
    with pytest.raises(pulsar.PulsarException):
        old.send(b"old-after")
    new.send(b"new-2")
    assert _read_all(client, topic) == [b"old-before", b"new-1", b"new-2"]
