"""The conformance suite against the Pulsar-backed MetadataStore, plus what only
a real broker can show: other processes, and a holder killed with SIGKILL."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator

import pulsar
import pytest
from harness import PulsarEndpoint, unique_name, unique_topic, wait_until
from metadata_conformance import *  # noqa: F403  (the shared tests)
from metadata_conformance import StoreFactory
from state_workers import counter_worker
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from pulsar_state import (
    BaseMetadataStore,
    CoordinationService,
    LockEvent,
    MetadataStore,
    SessionLostError,
)
from pulsar_state.config import StateConfig
from pulsar_state.metadata.tree import SessionEvent

SESSION = {"session_timeout_s": 2.0, "session_check_interval_s": 0.5}


@pytest.fixture
def base() -> str:
    return f"/{unique_name('conf')}"


@pytest.fixture
def topic() -> str:
    return unique_topic("meta")


@pytest.fixture
def stores(pulsar_endpoint: PulsarEndpoint, topic: str) -> Iterator[StoreFactory]:
    opened: list[tuple[pulsar.Client, MetadataStore]] = []

    def open_store(config: StateConfig | None = None) -> BaseMetadataStore:
        client = pulsar.Client(
            pulsar_endpoint.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        store = MetadataStore(
            client, topic, admin_url=pulsar_endpoint.admin_url, config=config, **SESSION
        )
        opened.append((client, store))
        return store

    yield open_store
    for client, store in opened:
        store.close()
        client.close()


class PulsarSessionFaults:
    """A real session expiry through the broker: the store's session consumer
    goes away (as when its connection is cut), the broker lists no consumer on
    its subscription, and the other stores' checkers expire the session (its
    ephemeral nodes deleted, its subscription removed) after the timeout. The
    store hears CONNECTION_LOST, then SESSION_LOST from its own watch. Restoring
    subscribes again, with the same session id, as the client's reconnection does."""

    def lose(self, store: BaseMetadataStore) -> None:
        assert isinstance(store, MetadataStore)
        store._session.close()
        wait_until(
            lambda: store.session_state is SessionEvent.SESSION_LOST,
            timeout_s=SESSION["session_timeout_s"] + 10,
            message="the store saw its session lost",
        )

    def restore(self, store: BaseMetadataStore) -> None:
        assert isinstance(store, MetadataStore)
        # a subscribe can outlast the client's operation timeout on a loaded
        # machine (seen under stress-ng): the client's own reconnection retries
        # too, so the fault's restoring does
        for attempt in Retrying(
            retry=retry_if_exception_type(pulsar.Timeout), stop=stop_after_attempt(4), reraise=True
        ):
            with attempt:
                store._subscribe_session()
        wait_until(
            lambda: store.session_healthy,
            timeout_s=30,
            message="the store saw its session back",
        )


@pytest.fixture
def session_faults() -> PulsarSessionFaults:
    return PulsarSessionFaults()


def test_compare_and_set_from_several_processes(
    pulsar_endpoint: PulsarEndpoint, topic: str, base: str
) -> None:
    ctx = multiprocessing.get_context("spawn")
    args = (pulsar_endpoint.service_url, pulsar_endpoint.admin_url, topic, f"{base}/n", 15)
    with ctx.Pool(4) as pool:
        results = pool.starmap(counter_worker, [args] * 4)
    values = sorted(v for chunk in results for v in chunk)
    assert values == list(range(1, 61))  # unique and gap-free across processes


def test_lock_holder_killed_loses_the_lock(
    pulsar_endpoint: PulsarEndpoint, stores: Callable[[], BaseMetadataStore], topic: str, base: str
) -> None:
    path = f"{base}/lease"
    script = textwrap.dedent(
        f"""
        import sys, time, pulsar
        from pulsar_state import CoordinationService, MetadataStore
        client = pulsar.Client({pulsar_endpoint.service_url!r},
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        store = MetadataStore(client, {topic!r}, admin_url={pulsar_endpoint.admin_url!r},
                              session_timeout_s=2.0, session_check_interval_s=0.5)
        CoordinationService(store).acquire_lock({path!r}, "victim").result(30)
        print("locked", flush=True)
        time.sleep(600)
        """
    )
    victim = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert victim.stdout is not None
        for line in victim.stdout:  # the client may log to stdout first
            if line.strip() == "locked":
                break
        else:
            pytest.fail("the victim process never took the lock")
        watcher = CoordinationService[str](stores())
        wait_until(lambda: watcher.read_lock(path).result(30) == "victim", timeout_s=30)
        elected = watcher.become_leader(path, "watcher")
        killed_at = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        lock = elected.result(60)
        took = time.monotonic() - killed_at
        assert lock.content == "watcher"
        # the documented bound: session_timeout_s + session_check_interval_s + a write
        assert took < 2.0 + 0.5 + 10
        watcher.close()
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.fault
def test_listeners_resume_after_a_broker_restart(
    pulsar_endpoint: PulsarEndpoint, stores: Callable[[], BaseMetadataStore], base: str
) -> None:
    if not pulsar_endpoint.can_restart:
        pytest.skip(f"cannot restart a {pulsar_endpoint.kind} broker")
    watcher, writer = stores(), stores()
    seen: list[str] = []
    watcher.register_listener(lambda n: seen.append(n.path) if n.type.value == "created" else None)
    writer.put(f"{base}/before", b"1").result(30)
    wait_until(lambda: f"{base}/before" in seen, timeout_s=30)
    pulsar_endpoint.restart()
    writer.put(f"{base}/after", b"2").result(120)
    wait_until(lambda: f"{base}/after" in seen, timeout_s=120, message="notified after restart")
    got = watcher.get(f"{base}/after", latest=True).result(60)  # type: ignore[call-arg]
    assert got is not None and got.value == b"2"


def test_a_lock_whose_node_survived_the_session_loss_is_kept(
    stores: Callable[[], BaseMetadataStore], base: str
) -> None:
    """Nobody expired the session (no other store checks it): when it is back the
    revalidation finds its own node and keeps the lock, same token; meanwhile
    the lock is suspended and no ephemeral node can be made."""
    store = stores()
    assert isinstance(store, MetadataStore)
    coord = CoordinationService[str](store)
    lock = coord.acquire_lock(f"{base}/lone", "me").result(30)
    token = lock.fencing_token
    events: list[LockEvent] = []
    lock.add_listener(events.append)
    faults = PulsarSessionFaults()
    faults.lose(store)
    wait_until(lambda: events == [LockEvent.SESSION_LOST], timeout_s=30, message=f"{events}")
    assert lock.suspended and not lock.held
    with pytest.raises(SessionLostError):
        store.put(f"{base}/eph", b"", ephemeral=True).result(30)
    node = store.get(f"{base}/lone", latest=True).result(30)
    assert node is not None and lock.owns(node), "no other store: nobody expired the node"
    faults.restore(store)
    wait_until(lambda: lock.held, timeout_s=30, message="the lock revalidated")
    assert events == [LockEvent.SESSION_LOST, LockEvent.REASSERTED]
    assert lock.fencing_token == token and lock.owns(store.get(f"{base}/lone").result(30))
    coord.close()


def test_a_dead_session_with_more_nodes_than_one_write_carries_loses_them_all(
    stores: Callable[[StateConfig], BaseMetadataStore], base: str
) -> None:
    """35 ephemeral nodes, at most 10 ops a write: the checker deletes them over
    several writes. Before, it tried one write of 35 deletes, which the write
    limits refuse, on every check: the dead session's nodes (its locks) stayed
    for ever (with the default limits, from about 35,000 nodes)."""
    config = StateConfig(max_ops_per_write=10)
    holder, checker = stores(config), stores(config)
    assert isinstance(holder, MetadataStore)
    for i in range(35):
        holder.put(f"{base}/e{i:02d}", b"x", ephemeral=True).result(30)
    assert len(checker.get_children(base, latest=True).result(30)) == 35
    holder._session.close()  # its session consumer gone, as when its connection is cut
    wait_until(
        lambda: checker.get_children(base, latest=True).result(30) == [],
        timeout_s=60,
        message="the dead session's 35 ephemeral nodes deleted",
    )
