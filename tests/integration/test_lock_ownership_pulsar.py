"""Lock ownership on the Pulsar-backed store, against the real broker: a bounded
number of random steps, with sessions expiring the real way (their liveness
consumer goes away; the other sessions' checkers delete their nodes)."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from harness import PulsarEndpoint, unique_name, unique_topic, wait_until
from lock_model import Node, check_lock_ownership

from pulsar_state import BaseMetadataStore, MetadataStore

SESSION = {"session_timeout_s": 2.0, "session_check_interval_s": 0.25}


@pytest.fixture
def client(pulsar_endpoint: PulsarEndpoint) -> Iterator[pulsar.Client]:
    c = pulsar.Client(
        pulsar_endpoint.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    yield c
    c.close()


def test_random_acquire_release_expire_delete(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client
) -> None:
    topic = unique_topic("locks")
    base = f"/{unique_name('own')}"
    opened: list[MetadataStore] = []

    def new_store() -> BaseMetadataStore:
        store = MetadataStore(client, topic, admin_url=pulsar_endpoint.admin_url, **SESSION)
        opened.append(store)
        return store

    operator = new_store()

    def node_of(path: str) -> Node | None:
        got = operator.get(path, latest=True).result(30)
        if got is None:
            return None
        return got.stat.owner, operator.fencing_token(path) or 0

    def expire(store: BaseMetadataStore) -> None:
        """Cut the session's liveness (its consumer), not its data path, and wait
        until the other sessions' checkers have deleted its nodes."""
        assert isinstance(store, MetadataStore)
        store._session.close()
        wait_until(
            lambda: (
                not any((n := node_of(p)) is not None and n[0] == store.session_id for p in paths)
            ),
            timeout_s=30,
            message=f"the nodes of the expired session {store.session_id} deleted",
        )

    paths = [f"{base}/a", f"{base}/b"]
    try:
        counts = check_lock_ownership(
            new_store=new_store,
            operator=operator,
            node_of=node_of,
            expire=expire,
            paths=paths,
            steps=60,
            seed=14,
            sessions=3,
            settle_s=20.0,
            weights=(6, 4, 1, 3),
        )
    finally:
        for store in opened:
            store.close()
    for kind in ("acquire", "release", "stale_release", "expire", "delete", "busy"):
        assert counts[kind] > 0, f"never exercised {kind}: {counts}"
