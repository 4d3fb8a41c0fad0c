"""Issue #27: the Spark source on a Spark standalone cluster reads a map of the
local Pulsar cluster with a token, through the broker that does not own the topic.

A master and two workers (1 core, 512 MiB each) are started from the pyspark
package's own launcher (``tests/spark_cluster.py``); the session's executors are
JVMs of their own, launched by the workers, so the options (the token with them)
reach the tasks only as the pickled reader. The map is written with the
super-user's token; the source is given the non-owner's service and admin URLs.
What must hold: a snapshot in two partitions, its tasks run on both executors,
and a changelog give the map's items; without the token the read is refused on
the driver with the source's own permission message, at once.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_access import QUIET, created_on_one
from harness import wait_until
from pyspark.sql import DataFrame, SparkSession
from spark_cluster import SparkStandalone, executor_ids, spark_standalone, task_executors

from pulsar_state import PulsarMap, StateConfig
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.connectors.spark_source import PulsarStateDataSource
from pulsar_state.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    with spark_standalone(tmp_path_factory.mktemp("spark-standalone"), python=sys.executable) as c:
        yield c


@pytest.fixture(scope="module")
def spark(spark_cluster: SparkStandalone) -> Iterator[SparkSession]:
    assert SparkSession.getActiveSession() is None, "a session of another test is still open"
    # the Python of the source's code, on the driver (planning) and on the executors
    # (reading): PYSPARK_PYTHON when the context starts (SparkContext.pythonExec);
    # spark.pyspark.python on the builder alone left the driver's planning on python3
    os.environ.setdefault("PYSPARK_PYTHON", spark_cluster.python)
    session = (
        SparkSession.builder.master(spark_cluster.master_url)
        .appName("pulsar-state-spark-cluster")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", spark_cluster.worker_memory)
        .config("spark.executor.cores", "1")
        # its REST API names the executor of each task (explicit: a session this
        # process ran before may have turned the UI off for the driver's JVM)
        .config("spark.ui.enabled", "true")
        .config("spark.ui.port", "0")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    try:
        assert session.sparkContext.master == spark_cluster.master_url
        assert session.sparkContext.uiWebUrl, "the driver's web UI (its REST API) is off"
        session.sparkContext.setLogLevel("ERROR")
        session.dataSource.register(PulsarStateDataSource)
        # both executors registered before any read: a read's two tasks can then
        # start at once, one on each (1 core each)
        wait_until(
            lambda: len(executor_ids(session)) == spark_cluster.workers,
            timeout_s=120,
            interval_s=0.3,
            message="an executor on every worker",
        )
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def written(local_cluster: EmbeddedCluster) -> tuple[str, int, dict[str, Any]]:
    """A map written through the non-owner with the token: its topic, the index of
    the broker that does not own it, and its items."""
    topic, elsewhere = created_on_one(local_cluster, "spark-cluster")
    token = local_cluster.superuser_token or ""
    client = local_cluster.client(operation_timeout_seconds=60, logger=QUIET)
    endpoint = AdminEndpoint(url=elsewhere, headers={"Authorization": f"Bearer {token}"})
    try:
        with PulsarMap[str, Any](
            client, topic, admin=endpoint, config=StateConfig(operation_timeout_s=60)
        ) as m:
            m.put_all({f"k{i}": {"i": i} for i in range(40)}).result(60)
            for i in range(0, 40, 7):
                m.put(f"k{i}", {"i": i, "round": 2}).result(60)
            m.delete("k3").result(60)
            m.put("text", "hello").result(60)
            items = m.items(latest=True).result(60)
    finally:
        client.close()
    assert len(items) == 40, items
    return topic, local_cluster.admin_urls.index(elsewhere), items


def _read(
    spark: SparkSession, cluster: EmbeddedCluster, broker: int, topic: str, **options: str
) -> DataFrame:
    reader = (
        spark.read.format("pulsar_state")
        .option("serviceUrl", cluster.service_urls[broker])
        .option("adminUrl", cluster.admin_urls[broker])
        .option("topic", topic)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_a_snapshot_on_both_executors_with_a_token(
    spark: SparkSession,
    spark_cluster: SparkStandalone,
    local_cluster: EmbeddedCluster,
    written: tuple[str, int, dict[str, Any]],
) -> None:
    topic, elsewhere, items = written
    token = local_cluster.superuser_token or ""
    spark.sparkContext.setJobGroup("snapshot", "a snapshot in two partitions")
    df = _read(spark, local_cluster, elsewhere, topic, authToken=token, numPartitions="2")
    assert {row.key: json.loads(row.value) for row in df.collect()} == items
    ran_on = task_executors(spark, "snapshot")
    assert len(ran_on) == 2, ran_on  # one successful task a partition
    assert set(ran_on) == executor_ids(spark), ran_on  # one on each worker's executor


def test_a_changelog_with_a_token(
    spark: SparkSession, local_cluster: EmbeddedCluster, written: tuple[str, int, dict[str, Any]]
) -> None:
    topic, elsewhere, items = written
    token = local_cluster.superuser_token or ""
    spark.sparkContext.setJobGroup("changelog", "a changelog in two ranges")
    df = _read(
        spark, local_cluster, elsewhere, topic, authToken=token, mode="changelog", numPartitions="2"
    )
    folded: dict[str, Any] = {}
    for row in df.orderBy("ledger_id", "entry_id", "batch_index").collect():
        if row.change_type == "delete":
            folded.pop(row.key, None)
        else:
            folded[row.key] = json.loads(row.value)
    assert folded == items


def test_without_the_token_the_read_is_refused_clearly(
    spark: SparkSession, local_cluster: EmbeddedCluster, written: tuple[str, int, dict[str, Any]]
) -> None:
    topic, elsewhere, _ = written
    with pytest.raises(Exception) as refused:  # Spark wraps the source's PermissionError
        _read(spark, local_cluster, elsewhere, topic, numPartitions="2").collect()
    text = str(refused.value)
    assert "PermissionError" in text, text
    assert "did not accept this source's credentials" in text, text
    assert "authToken" in text, text
