"""The Spark data source with a TLS client certificate as its credentials
(``authPlugin=tls``), on a private standalone whose binary protocol and admin API
take certificates (``AuthenticationProviderTls``) and refuse anonymous clients.

The certificate's common name is the super-user's role. The executors' readers,
the driver's last-position subscription and its admin calls (topic check,
checkpoint lookup) must all show it; without it the read is refused with a clear
message. The broker's own internal client authenticates with a token
(``TokenAuthority``); the tests use certificates only.
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
from tls_brokers import ClientAuthBroker, client_auth_standalone

from pulsar_state import PulsarMap
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.connectors.spark_source import PulsarStateDataSource


@pytest.fixture(scope="module")
def cert_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientAuthBroker]:
    certs = tmp_path_factory.mktemp("spark-tls-client-auth")
    with client_auth_standalone(certs, "spark-tls-client-auth") as broker:
        yield broker


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pulsar-state-spark-tls-client-auth")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(PulsarStateDataSource)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def written(cert_broker: ClientAuthBroker) -> tuple[str, dict[str, Any]]:
    """A map written with the core, authenticated by the same certificate."""
    auth = ClusterAuth(
        auth_plugin="tls",
        auth_params=cert_broker.auth_params,
        tls_trust_cert_path=cert_broker.ca_file,
    )
    topic = unique_topic("spark-cert")
    rows = {f"k{i}": f"v{i}" for i in range(15)}
    client = pulsar.Client(
        cert_broker.service_url,
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        **auth.client_kwargs(),
    )
    try:
        with PulsarMap[str, Any](
            client, topic, admin=auth.admin_endpoint(cert_broker.admin_url)
        ) as m:
            m.put_all(rows).result(60)
    finally:
        client.close()
    return topic, rows


def _read(spark: SparkSession, broker: ClientAuthBroker, topic: str, **options: str) -> DataFrame:
    reader = (
        spark.read.format("pulsar_state")
        .option("serviceUrl", broker.service_url)
        .option("adminUrl", broker.admin_url)
        .option("topic", topic)
        .option("tlsTrustCertsFilePath", broker.ca_file)
        .option("timeoutMs", "20000")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_a_snapshot_with_a_tls_client_certificate(
    spark: SparkSession, cert_broker: ClientAuthBroker, written: tuple[str, dict[str, Any]]
) -> None:
    topic, rows = written
    df = _read(
        spark,
        cert_broker,
        topic,
        authPlugin="org.apache.pulsar.client.impl.auth.AuthenticationTls",
        authParams=cert_broker.auth_params,
        numPartitions="2",
    )
    assert {row.key: json.loads(row.value) for row in df.collect()} == rows


def test_without_the_certificate_the_read_is_refused_clearly(
    spark: SparkSession, cert_broker: ClientAuthBroker, written: tuple[str, dict[str, Any]]
) -> None:
    topic, _ = written
    with pytest.raises(Exception) as refused:  # Spark wraps the source's PermissionError
        _read(spark, cert_broker, topic).collect()
    text = str(refused.value)
    assert "PermissionError" in text, text
    assert "authPlugin" in text, text
