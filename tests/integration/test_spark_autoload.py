"""Spark finds the ``pulsar_state`` source with no registration call (issue #28):
a fresh session (a child process, nothing of this suite's registrations) reads
a map through ``spark.read.format`` and through SQL alone (``USING pulsar_state``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pulsar
from harness import PulsarEndpoint, unique_topic

from pulsar_state import PulsarMap

SESSION = """
import json, sys
from pyspark.sql import SparkSession
service, admin, topic = sys.argv[1:4]
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "1")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
rows = (
    spark.read.format("pulsar_state")
    .options(serviceUrl=service, adminUrl=admin, topic=topic)
    .load()
    .collect()
)
print("read", json.dumps(sorted((r.key, json.loads(r.value)) for r in rows)))
spark.sql(
    f"CREATE TEMPORARY VIEW flags USING pulsar_state "
    f"OPTIONS (serviceUrl '{service}', adminUrl '{admin}', topic '{topic}')"
)
keys = [r.key for r in spark.sql("SELECT key FROM flags ORDER BY key").collect()]
print("sql", json.dumps(keys))
spark.stop()
"""


def test_a_fresh_session_reads_a_map_without_registering(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client
) -> None:
    topic = unique_topic("spark-autoload")
    with PulsarMap[str, int](client, topic, admin_url=pulsar_endpoint.admin_url) as m:
        m.put_all({"a": 1, "b": 2}).result(60)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SESSION,
            pulsar_endpoint.service_url,
            pulsar_endpoint.admin_url,
            topic,
        ],
        # Spark's workers (the lookup included) run this venv's Python, as a
        # user's session in a venv sets PYSPARK_PYTHON
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'read [["a", 1], ["b", 2]]' in done.stdout, done.stdout
    assert 'sql ["a", "b"]' in done.stdout, done.stdout
