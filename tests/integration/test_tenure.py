"""A holder's tenure in the queueing modes: kept while nobody waits, ended for a waiter.

In the adaptive mode (the default) a writer lets go of the topic after
``max_tenure_s`` (0.5 s), so that writers queued behind it get their turn. A lone
writer used to let go and gain the topic again every tenure: a new producer and
an epoch marker, with its writes stalled meanwhile. Near a tenure's end the
holder now asks the broker how many producers wait for the topic
(``waitingPublishers``) and keeps it while none does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from harness import unique_topic

from pulsar_state import PulsarMap, StateConfig, metrics

ClientFactory = Callable[[], pulsar.Client]


def _acquisitions(m: PulsarMap[Any, Any]) -> int:
    return int(m.manager._writer.tenure._acquisitions)


def _count(metric: Any, topic: str) -> float:
    return float(metric.labels(topic)._value.get())


def test_a_lone_writer_keeps_the_topic_past_its_tenure(
    make_client: ClientFactory, admin_url: str
) -> None:
    config = StateConfig()
    assert config.access_mode == "adaptive" and config.max_tenure_s == 0.5
    m = PulsarMap[str, int](make_client(), unique_topic("tenure-alone"), admin_url=admin_url)
    try:
        m.put("k", 0).result(timeout=30)
        assert _acquisitions(m) == 1
        deadline = time.monotonic() + 3.0  # six tenures
        i = 0
        while time.monotonic() < deadline:
            i += 1
            m.put("k", i).result(timeout=30)
            time.sleep(0.01)  # less than the idle release (50 ms): the writer stays busy
        assert m.get("k", latest=True).result(timeout=30) == i
        assert _acquisitions(m) == 1, "let go of the topic with nobody waiting"
        assert _count(metrics.TENURES_KEPT, m.topic) >= 4
    finally:
        m.close()


def test_without_the_admin_api_the_tenure_ends_as_before(make_client: ClientFactory) -> None:
    """No admin API, no way to see waiters: every tenure ends (a waiter in
    another process must never wait for a whole operation timeout)."""
    m = PulsarMap[str, int](
        make_client(), unique_topic("tenure-no-admin"), config=StateConfig(ensure_retention=False)
    )
    try:
        m.put("k", 0).result(timeout=30)
        deadline = time.monotonic() + 2.0
        i = 0
        while time.monotonic() < deadline:
            i += 1
            m.put("k", i).result(timeout=30)
            time.sleep(0.01)
        assert _acquisitions(m) >= 3
        assert _count(metrics.TENURES_KEPT, m.topic) == 0
    finally:
        m.close()


@pytest.mark.timeout(120)
def test_a_waiting_writer_gets_the_topic_after_one_tenure(
    make_client: ClientFactory, admin_url: str
) -> None:
    """A holder that writes without pause still lets a queued writer in at its
    tenure's end: the waiter is seen, not fenced in after its operation
    timeout (15 s for these clients)."""
    topic = unique_topic("tenure-waiter")
    holder = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    waiter = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    stop = threading.Event()
    errors: list[BaseException] = []

    def keep_writing() -> None:
        i = 0
        try:
            while not stop.is_set():
                i += 1
                holder.put("busy", i).result(timeout=60)
        except BaseException as exc:  # reported below
            errors.append(exc)

    writing = threading.Thread(target=keep_writing)
    try:
        holder.put("busy", 0).result(timeout=30)
        writing.start()
        time.sleep(1.0)  # the holder's tenures are being kept: nobody waits yet
        assert _count(metrics.TENURES_KEPT, holder.topic) >= 1
        waiter.put("waiter", 1).result(timeout=60)
        # let in at a tenure's end: a holder that never let go would have been
        # fenced once the waiter's operation timeout ran out (a takeover)
        assert _count(metrics.TAKEOVERS, waiter.topic) == 0, "the waiter had to fence"
        assert holder.get("waiter", latest=True).result(timeout=30) == 1
    finally:
        stop.set()
        if writing.is_alive():
            writing.join(timeout=60)
        holder.close()
        waiter.close()
    assert not errors, errors
