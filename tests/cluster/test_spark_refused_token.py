"""A Spark task whose credentials the broker refuses fails with a permission
error, not a timeout.

The driver checks the credentials with the admin API before planning, so a
read whose token is refused fails there at once (test_spark_cluster.py). A
task opens its reader over the binary protocol only, and the C++ client
reports a refused connection as a timeout after retrying it for its whole
operation timeout (Pulsar 4.0.8, pulsar-client 3.x): before, a task whose
token was refused (revoked between planning and the task, or another token on
the executors) failed with ``TimeoutError`` after ``timeoutMs``. Now, after an
attempt that timed out, the task asks the admin API with the same
credentials and raises its ``PermissionError``. These open a task's reader
exactly as a partition does (``TopicReader.of``), on the token cluster,
through the broker that does not own the topic.
"""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from cluster_access import QUIET, admin_endpoint, created_on_one

from pulsar_state import PulsarMap
from pulsar_state.connectors.spark_options import SourceOptions
from pulsar_state.connectors.spark_topic_reader import TopicReader
from pulsar_state.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def written(local_cluster: EmbeddedCluster) -> Iterator[tuple[str, int]]:
    """A map with one item; its topic and the index of the broker that does not own it."""
    topic, elsewhere = created_on_one(local_cluster, "refused")
    client = local_cluster.client(logger=QUIET)
    try:
        with PulsarMap[str, int](client, topic, admin=admin_endpoint(local_cluster)) as m:
            m.put("a", 1).result()
        yield topic, local_cluster.admin_urls.index(elsewhere)
    finally:
        client.close()


def _options(cluster: EmbeddedCluster, broker: int, topic: str, **more: str) -> SourceOptions:
    return SourceOptions.parse(
        {
            "serviceUrl": cluster.service_urls[broker],
            "adminUrl": cluster.admin_urls[broker],
            "topic": topic,
            "timeoutMs": "20000",
            **more,
        }
    )


@pytest.mark.parametrize(
    "credentials",
    [{"authToken": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJub2JvZHkifQ.refused"}, {}],
    ids=["a refused token", "no token"],
)
def test_a_task_whose_credentials_are_refused_raises_permission_error(
    local_cluster: EmbeddedCluster, written: tuple[str, int], credentials: dict[str, str]
) -> None:
    topic, elsewhere = written
    opts = _options(local_cluster, elsewhere, topic, **credentials)
    with pytest.raises(PermissionError, match="credentials"):
        TopicReader.of(opts, pulsar.MessageId.earliest, "for a task", inclusive=True)


def test_a_task_with_the_token_reads(
    local_cluster: EmbeddedCluster, written: tuple[str, int]
) -> None:
    topic, elsewhere = written
    token = local_cluster.superuser_token or ""
    opts = _options(local_cluster, elsewhere, topic, authToken=token)
    reader = TopicReader.of(opts, pulsar.MessageId.earliest, "for a task", inclusive=True)
    try:
        keys = set()
        while "a" not in keys:
            keys.add(reader.read_next().partition_key())
    finally:
        reader.close()
