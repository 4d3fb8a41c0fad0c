"""The Spark data source over TLS: a private standalone whose binary protocol and admin
API speak only TLS, with a certificate signed by a private CA (``trustme``).

The source takes the trust the way Pulsar's ``client.conf`` spells it
(``tlsTrustCertsFilePath``); the readers on the executors and the driver's admin
calls (topic check, checkpoint lookup, last position) must all use it. Without it
the read fails with a message that names the option, never hangs.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from harness import unique_topic
from pyspark.sql import DataFrame, SparkSession
from tls_brokers import TlsBroker, tls_standalone

from pulsar_state import AdminEndpoint, PulsarMap
from pulsar_state.connectors.spark_source import PulsarStateDataSource


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    """A private standalone (its own data dir, its own ports) on TLS only."""
    with tls_standalone(tmp_path_factory.mktemp("spark-tls"), "spark-tls") as broker:
        yield broker


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pulsar-state-spark-tls")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(PulsarStateDataSource)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def written(tls_broker: TlsBroker) -> tuple[str, dict[str, Any]]:
    """A map on the TLS broker, written with the core (trusting the CA)."""
    topic = unique_topic("spark-tls")
    rows = {f"k{i}": {"i": i} for i in range(20)}
    client = pulsar.Client(
        tls_broker.service_url,
        tls_trust_certs_file_path=tls_broker.ca_file,
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        admin = AdminEndpoint(url=tls_broker.admin_url, tls_trust_cert_path=tls_broker.ca_file)
        with PulsarMap[str, Any](client, topic, admin=admin) as m:
            m.put_all(rows).result(60)
            m.delete("k0").result(60)
    finally:
        client.close()
    del rows["k0"]
    return topic, rows


def _read(spark: SparkSession, broker: TlsBroker, topic: str, **options: str) -> DataFrame:
    reader = (
        spark.read.format("pulsar_state")
        .option("serviceUrl", broker.service_url)
        .option("adminUrl", broker.admin_url)
        .option("topic", topic)
        .option("timeoutMs", "20000")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_a_snapshot_over_tls_with_the_ca_from_tls_trust_certs_file_path(
    spark: SparkSession, tls_broker: TlsBroker, written: tuple[str, dict[str, Any]]
) -> None:
    topic, rows = written
    # two partitions: the readers on the executors need the trust too, not only the driver
    df = _read(
        spark,
        tls_broker,
        topic,
        tlsTrustCertsFilePath=tls_broker.ca_file,
        numPartitions="2",
        includeMetadata="true",
    )
    got = {row.key: json.loads(row.value) for row in df.collect()}
    assert got == rows


def test_a_snapshot_over_tls_without_the_ca_fails_naming_the_option(
    spark: SparkSession, tls_broker: TlsBroker, written: tuple[str, dict[str, Any]]
) -> None:
    topic, _ = written
    with pytest.raises(Exception) as failed:  # Spark wraps the source's error
        _read(spark, tls_broker, topic).collect()
    text = str(failed.value)
    assert "certificate" in text.lower(), text
    assert "tlsTrustCertsFilePath" in text, text


def test_tls_allow_insecure_connection_reads_without_the_ca(
    spark: SparkSession, tls_broker: TlsBroker, written: tuple[str, dict[str, Any]]
) -> None:
    topic, rows = written
    df = _read(spark, tls_broker, topic, tlsAllowInsecureConnection="true")
    assert {row.key: json.loads(row.value) for row in df.collect()} == rows
