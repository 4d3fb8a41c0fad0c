"""Issue #27: on a two-broker cluster with token authentication, the library
works through the broker that does not own the topic.

Such a broker answers a topic-level admin call with 307 to the owner. Before
``ClusterSession`` the token was dropped on the way: opening a map through
the non-owner failed with ``PermissionDeniedError ... (401)``, a checkpoint
failed once the checkpoint topic lived on the other broker, and the CLI and
the Spark source's admin reads failed likewise. Each test below first checks
that its admin URL really is the non-owner's (the topic's owner is looked up),
so that a redirect is taken, not assumed.
"""

from __future__ import annotations

import pulsar
import pytest
import requests
from cluster_access import QUIET, bearer, created_on_one
from harness import pulsar_state_cli
from map_round_trip import write_read_checkpoint

from pulsar_state import CoordinationService, MetadataStore
from pulsar_state.cluster.admin import PulsarAdmin, topic_path
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.connectors.spark_options import SourceOptions
from pulsar_state.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(900)


def _client(cluster: EmbeddedCluster) -> pulsar.Client:
    return pulsar.Client(
        cluster.service_url,
        authentication=pulsar.AuthenticationToken(cluster.superuser_token),
        operation_timeout_seconds=60,
        logger=QUIET,
    )


def test_the_non_owner_redirects_and_a_plain_redirect_loses_the_token(
    local_cluster: EmbeddedCluster,
) -> None:
    """What the library met: the 307, and requests' own following answered 401."""
    topic, elsewhere = created_on_one(local_cluster, "redirect-seen")
    url = f"{elsewhere}/admin/v2/{topic_path(topic)}/stats"
    first = requests.get(url, headers=bearer(local_cluster), timeout=60, allow_redirects=False)
    assert first.status_code == 307
    assert requests.get(url, headers=bearer(local_cluster), timeout=60).status_code == 401
    # through the library's session: followed with the token
    stats = PulsarAdmin(elsewhere, headers=bearer(local_cluster)).stats(topic)
    assert "subscriptions" in stats


def test_a_map_opened_through_the_non_owner_writes_reads_and_checkpoints(
    local_cluster: EmbeddedCluster,
) -> None:
    topic, elsewhere = created_on_one(local_cluster, "map-non-owner")
    client = _client(local_cluster)
    endpoint = AdminEndpoint(url=elsewhere, headers=bearer(local_cluster))
    try:
        # write, read, checkpoint; a second map through the same broker bootstraps from it
        write_read_checkpoint(client, topic, endpoint)
    finally:
        client.close()


def test_the_cli_through_the_non_owner(local_cluster: EmbeddedCluster) -> None:
    topic, elsewhere = created_on_one(local_cluster, "cli-non-owner")
    env = {
        "PULSAR_SERVICE_URL": local_cluster.service_url,
        "PULSAR_ADMIN_URL": elsewhere,
        "PULSAR_AUTH_TOKEN": local_cluster.superuser_token or "",
    }
    put = pulsar_state_cli("map", "--topic", topic, "put", "colour", '"blue"', env=env)
    assert put.returncode == 0, put.stderr
    got = pulsar_state_cli("map", "--topic", topic, "get", "colour", env=env)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == '"blue"'


def test_the_spark_sources_admin_reads_through_the_non_owner(
    local_cluster: EmbeddedCluster,
) -> None:
    topic, elsewhere = created_on_one(local_cluster, "spark-non-owner")
    opts = SourceOptions.parse(
        {
            "serviceUrl": local_cluster.service_url,
            "adminUrl": elsewhere,
            "topic": topic,
            "authToken": local_cluster.superuser_token or "",
        }
    )
    opts.check_topic()
    assert "ledgers" in opts.internal_stats()


def test_a_metadata_store_and_its_locks_through_the_non_owner(
    local_cluster: EmbeddedCluster,
) -> None:
    """The store's companion topic (its sessions) is made and protected through
    the broker that does not own the store's topic, and a lock works across two
    stores, one through each broker."""
    topic, elsewhere = created_on_one(local_cluster, "meta-non-owner")
    owner_url = next(url for url in local_cluster.admin_urls if url != elsewhere)
    clients = [_client(local_cluster), _client(local_cluster)]
    via = [AdminEndpoint(url=url, headers=bearer(local_cluster)) for url in (elsewhere, owner_url)]
    try:
        with (
            MetadataStore(clients[0], topic, admin=via[0]) as first,
            MetadataStore(clients[1], topic, admin=via[1]) as second,
        ):
            held = CoordinationService[str](first).acquire_lock("/locks/a", "first").result(60)
            other = CoordinationService[str](second)
            assert other.read_lock("/locks/a").result(60) == "first"
            held.release().result(60)
            taken = other.lock("/locks/a", "second", timeout_s=60)
            assert taken.held and taken.fencing_token > held.fencing_token
            taken.release().result(60)
    finally:
        for client in clients:
            client.close()
