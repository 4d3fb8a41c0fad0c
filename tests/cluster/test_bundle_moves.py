"""Issue #27: writers through moves of the topic between brokers (bundle unloads).

Register workers in processes of their own (as in test_rolling_restart.py) run
latest reads, compare-and-sets, increments and blind puts while the bundle
that holds the map's topic is unloaded every few seconds, as an operator or
the load manager's shedding does (:func:`move_bundle`: from the leader's
broker with the other as its destination, so it moves; from the other
plainly, where it may stay). The topic starts on the leader's broker, so the
first unload moves it. The owner closes the topic, the next lookup places the
bundle again. It runs on the session's cluster (token auth, TLS) and on one
without authentication. What must hold:

- the topic's owner, read from the admin API after each unload, changed at
  least once (the writers really moved);
- the history of each key plus a final latest read by a fresh map is
  linearizable, and no acknowledged increment is missing.

The row goes to the fault report's section "On a local cluster".
"""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path

import pytest
from cluster_access import QUIET, created_on_one, followed, owner_index
from cluster_history import check_and_report, cluster_workload
from fault_report import FaultReport, FaultScale
from workload import Fault, Workload

from pulsar_state.cluster.admin import topic_path
from pulsar_state.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(900)


def leader_index(cluster: EmbeddedCluster) -> int:
    """The index of the broker that is the load manager's leader.

    Returns:
        0 for broker 0, 1 for broker 1, ...
    """
    leader = followed(cluster, "GET", f"{cluster.admin_urls[0]}/admin/v2/brokers/leaderBroker")
    leader.raise_for_status()
    return _broker_ids(cluster).index(leader.json()["brokerId"])


def _broker_ids(cluster: EmbeddedCluster) -> list[str]:
    return [url.split("//", 1)[1] for url in cluster.admin_urls]


def move_bundle(cluster: EmbeddedCluster, topic: str, owner: int) -> str:
    """Unload the bundle that holds ``topic`` from its ``owner``, to move it.

    Pulsar 4.0.8 places an unloaded bundle as its load manager likes: a plain
    unload from the leader's broker left the bundle there (4 of 4 times), from
    the other broker it moved to the leader 5 of 5 times in one cluster and 0 of
    4 in another; ``destinationBroker`` works when the leader owns the bundle,
    and loops on redirects otherwise (docs/cluster.md). So the leader's bundle
    is unloaded with the other broker as its destination (it moves), the other
    broker's plainly (it may stay). Where it went is for the caller to read.

    Returns:
        The bundle's range (``0x.._0x..``).
    """
    admin = cluster.admin_urls[owner]
    found = followed(cluster, "GET", f"{admin}/lookup/v2/topic/{topic_path(topic)}/bundle")
    found.raise_for_status()
    bundle = found.text.strip().strip('"')
    params = {}
    if leader_index(cluster) == owner:
        params["destinationBroker"] = _broker_ids(cluster)[1 - owner]
    namespace = "/".join(topic.removeprefix("persistent://").split("/")[:2])
    url = f"{admin}/admin/v2/namespaces/{namespace}/{bundle}/unload"
    done = followed(cluster, "PUT", url, params=params)
    assert done.status_code in (200, 204), done.text
    return bundle


def on_the_leader(cluster: EmbeddedCluster, prefix: str) -> str:
    """A new topic whose bundle the load manager's leader owns (so that its first
    :func:`move_bundle` moves it for sure).

    Returns:
        The topic.
    """
    leader = leader_index(cluster)
    for _ in range(20):
        topic, _ = created_on_one(cluster, prefix)
        if owner_index(cluster, topic) == leader:
            return topic
    raise AssertionError("20 new topics, none on the leader's broker")


def test_writers_ride_through_bundle_moves(
    either_cluster: EmbeddedCluster,
    tmp_path: Path,
    fault_scale: FaultScale,
    fault_report: FaultReport,
) -> None:
    cluster = either_cluster
    topic = on_the_leader(cluster, "moves")
    client = cluster.client(operation_timeout_seconds=30, logger=QUIET)
    owners = [owner_index(cluster, topic)]
    rng = random.Random(13)

    def nemesis(w: Workload) -> None:
        while True:
            time.sleep(fault_scale.kill_every_s / 2 * rng.uniform(0.5, 1.5))
            if w.elapsed() > w.seconds - 5:
                return
            at = w.elapsed()
            bundle = move_bundle(cluster, topic, owners[-1])
            owners.append(owner_index(cluster, topic))  # the lookup places the bundle again
            w.faults.append(Fault("bundle unload", at, f"{bundle} -> broker-{owners[-1]}"))

    workload = cluster_workload(cluster, client, topic, tmp_path, fault_scale, seed=13)
    try:
        workload.run_with(nemesis)
        changes = sum(a != b for a, b in itertools.pairwise(owners))
        check_and_report(
            cluster,
            client,
            workload,
            fault_report,
            test=f"bundle unloads moving the topic ({fault_scale.workers} processes; "
            "CAS, increments, blind puts; 3 keys)",
            note=f"bundle unloads: the topic's owner went {' -> '.join(map(str, owners))} "
            f"({changes} moves in {len(owners) - 1} unloads)",
        )
    finally:
        client.close()
    assert changes >= 1, f"no unload moved the topic: {owners}"
