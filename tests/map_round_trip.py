"""A map's round trip through one admin endpoint: write, read latest, checkpoint,
and a second map bootstrapping from that checkpoint. The cluster tests run it
through the broker that does not own the topic (``test_through_any_broker.py``,
plain and token; ``test_tls_through_any_broker.py``, https with a token or a
client certificate)."""

from __future__ import annotations

import pulsar

from pulsar_state import PulsarMap, StateConfig
from pulsar_state.cluster.endpoint import AdminEndpoint


def write_read_checkpoint(client: pulsar.Client, topic: str, endpoint: AdminEndpoint) -> None:
    """Open a map through ``endpoint``, write, read latest, checkpoint; a second map
    through the same endpoint bootstraps from that checkpoint and reads it all back."""
    with PulsarMap[str, int](
        client, topic, admin=endpoint, config=StateConfig(operation_timeout_s=60)
    ) as m:
        for i in range(20):
            m.put(f"k{i}", i).result(60)
        updated = m.update("k0", lambda v: (v or 0) + 100).result(60)
        assert updated == 100, updated
        manifest = m.checkpoint().result(120)
        assert manifest is not None, "the checkpoint wrote no manifest"
        latest = m.get("k19", latest=True).result(60)
        assert latest == 19, latest
    with PulsarMap[str, int](client, topic, admin=endpoint) as again:
        items = again.items(latest=True).result(60)
        assert items == {**{f"k{i}": i for i in range(20)}, "k0": 100}, items
