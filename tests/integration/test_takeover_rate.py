"""Writers contending for the topic fence no live holder by default, and at a
bounded rate when asked to.

Pulsar 4.0.8 can deadlock when a producer is fenced while its publishes
complete (docs/findings/pulsar-4.0.8-fencing-deadlock.md). Four processes
contend on one key (started together, as the bench's contended workload does):
by default (``access_mode="adaptive"``) they queue and take turns, and none of
them fences another; in ``"fencing"`` mode every acquisition is a takeover, and
the epoch markers on the topic (one per acquisition) stay under the configured
rate. Nothing is lost either way.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_topic
from prometheus_client import REGISTRY

from pulsar_state import BadVersionError, MetadataStore, PulsarMap, StateConfig
from pulsar_state.core.log.format import PROP_KIND, Kind

PROCESSES = 4
INCREMENTS = 150


@dataclass(frozen=True)
class _Spec:
    service_url: str
    admin_url: str
    topic: str
    how: str  # "update" on a map, or "cas": a compare-and-set loop on a store
    config: StateConfig


def _contend(spec: _Spec, ready: Any, go: Any, out: Any) -> None:  # pragma: no cover - child
    try:
        done = _increments(spec, ready, go)
        labels = {"topic": spec.topic}
        fences = REGISTRY.get_sample_value("pulsar_state_fences_total", labels) or 0.0
        takeovers = REGISTRY.get_sample_value("pulsar_state_takeovers_total", labels) or 0.0
        out.put((done, int(fences), int(takeovers)))
    except BaseException as exc:
        out.put(repr(exc))
        raise


def _increments(spec: _Spec, ready: Any, go: Any) -> int:  # pragma: no cover - child
    client = pulsar.Client(spec.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        if spec.how == "update":
            with PulsarMap[str, int](
                client, spec.topic, admin_url=spec.admin_url, config=spec.config
            ) as m:
                ready.put(1)
                go.wait(120)
                for _ in range(INCREMENTS):
                    m.update("n", lambda v: (v or 0) + 1).result(120)
            return INCREMENTS
        with MetadataStore(client, spec.topic, admin_url=spec.admin_url, config=spec.config) as s:
            ready.put(1)
            go.wait(120)
            done = 0
            while done < INCREMENTS:
                got = s.get("/n", latest=True).result(120)
                version = -1 if got is None else got.stat.version
                value = 1 if got is None else int(got.value) + 1
                try:
                    s.put("/n", str(value).encode(), version).result(120)
                    done += 1
                except BadVersionError:
                    continue
            return done
    finally:
        client.close()


def _epoch_markers(client: pulsar.Client, topic: str) -> int:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    count = 0
    try:
        while reader.has_message_available():
            if reader.read_next(10_000).properties().get(PROP_KIND) == Kind.EPOCH:
                count += 1
    finally:
        reader.close()
    return count


def _final(client: pulsar.Client, spec: _Spec) -> int:
    if spec.how == "update":
        with PulsarMap[str, int](client, spec.topic, admin_url=spec.admin_url) as m:
            return int(m.get("n", latest=True).result(60))
    with MetadataStore(client, spec.topic, admin_url=spec.admin_url) as store:
        got = store.get("/n", latest=True).result(60)
        return 0 if got is None else int(got.value)


@dataclass(frozen=True)
class _Outcome:
    acquisitions: int  # epoch markers appended during the run
    elapsed_s: float
    fences: int  # times a process lost the topic to another
    takeovers: int  # adaptive writers' fencing fallbacks


def _run(endpoint: PulsarEndpoint, client: pulsar.Client, spec: _Spec) -> _Outcome:
    """Run the contended increments; check nothing was lost."""
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=_contend, args=(spec, ready, go, out)) for _ in range(PROCESSES)]
    for w in workers:
        w.start()
    try:
        for _ in range(PROCESSES):
            ready.get(timeout=120)
        before = _epoch_markers(client, spec.topic)
        started = time.monotonic()
        go.set()
        done = [out.get(timeout=240) for _ in range(PROCESSES)]
        elapsed = time.monotonic() - started
    finally:
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.kill()
    assert [d[0] if isinstance(d, tuple) else d for d in done] == [INCREMENTS] * PROCESSES
    assert _final(client, spec) == PROCESSES * INCREMENTS
    return _Outcome(
        acquisitions=_epoch_markers(client, spec.topic) - before,
        elapsed_s=elapsed,
        fences=sum(d[1] for d in done),
        takeovers=sum(d[2] for d in done),
    )


def _bound(config: StateConfig, elapsed: float) -> float:
    # each process: its bucket's burst, then at most `rate` a second
    assert config.max_takeovers_per_s is not None
    return PROCESSES * (config.takeover_burst + config.max_takeovers_per_s * elapsed)


@pytest.mark.parametrize("how", ["update", "cas"])
def test_by_default_contending_writers_fence_no_one(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, how: str
) -> None:
    config = StateConfig()
    assert config.access_mode == "adaptive"
    topic = unique_topic(f"takeovers-{how}")
    spec = _Spec(pulsar_endpoint.service_url, pulsar_endpoint.admin_url, topic, how, config)
    outcome = _run(pulsar_endpoint, client, spec)
    assert outcome.acquisitions >= PROCESSES  # they did take turns
    assert (outcome.fences, outcome.takeovers) == (0, 0), outcome


@pytest.mark.fencing
def test_a_low_takeover_rate_is_kept_and_nothing_is_lost(
    broker_endpoint: PulsarEndpoint, client: pulsar.Client
) -> None:
    # far below the rate contention makes unbounded (~20/s here): the limiter is what keeps it
    config = StateConfig(access_mode="fencing", max_takeovers_per_s=1.0, takeover_burst=1)
    spec = _Spec(
        broker_endpoint.service_url,
        broker_endpoint.admin_url,
        unique_topic("takeovers-low"),
        "update",
        config,
    )
    outcome = _run(broker_endpoint, client, spec)
    # fencing mode keeps the topic until fenced: every acquisition past the
    # first took it from another process
    assert outcome.acquisitions > PROCESSES, outcome
    assert outcome.acquisitions <= _bound(config, outcome.elapsed_s), outcome
