"""Lock ownership on the Pulsar-backed store with sessions lost and brought back
the real way: a session's liveness consumer goes away, the other sessions'
checkers expire it through the broker's consumer list, then it subscribes again
(as the client's reconnection does) and its locks are revalidated."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from harness import PulsarEndpoint, unique_name, unique_topic, wait_until
from lock_model import Node, check_lock_ownership

from pulsar_state import BaseMetadataStore, MetadataStore
from pulsar_state.metadata.tree import SessionEvent

SESSION = {"session_timeout_s": 1.5, "session_check_interval_s": 0.25}


@pytest.fixture
def client(pulsar_endpoint: PulsarEndpoint) -> Iterator[pulsar.Client]:
    c = pulsar.Client(
        pulsar_endpoint.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    yield c
    c.close()


def test_random_steps_with_sessions_lost_and_back(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client
) -> None:
    topic = unique_topic("lock-sessions")
    base = f"/{unique_name('bounce')}"
    paths = [f"{base}/a", f"{base}/b"]
    opened: list[MetadataStore] = []

    def new_store() -> BaseMetadataStore:
        store = MetadataStore(client, topic, admin_url=pulsar_endpoint.admin_url, **SESSION)
        opened.append(store)
        return store

    operator = new_store()

    def node_of(path: str) -> Node | None:
        got = operator.get(path, latest=True).result(30)
        return None if got is None else (got.stat.owner, got.stat.token)

    def gone(store: MetadataStore) -> bool:
        return not any((n := node_of(p)) is not None and n[0] == store.session_id for p in paths)

    def expire(store: BaseMetadataStore) -> None:
        assert isinstance(store, MetadataStore)
        store._session.close()
        wait_until(lambda: gone(store), timeout_s=30, message="the expired session's nodes deleted")

    def lose(store: BaseMetadataStore) -> None:
        assert isinstance(store, MetadataStore)
        store._session.close()
        wait_until(
            lambda: store.session_state is SessionEvent.SESSION_LOST,
            timeout_s=30,
            message="the store saw its session lost",
        )

    def restore(store: BaseMetadataStore) -> None:
        assert isinstance(store, MetadataStore)
        store._subscribe_session()
        wait_until(
            lambda: store.session_healthy,
            timeout_s=30,
            message="the store saw its session back",
        )

    try:
        counts = check_lock_ownership(
            new_store=new_store,
            operator=operator,
            node_of=node_of,
            expire=expire,
            paths=paths,
            steps=30,
            seed=5,
            sessions=3,
            settle_s=20.0,
            weights=(6, 3, 1, 1),
            lose=lose,
            restore=restore,
            bounce_weight=3,
        )
    finally:
        for store in opened:
            store.close()
    for kind in ("acquire", "bounce", "reasserted"):
        assert counts[kind] > 0, f"never exercised {kind}: {counts}"
