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
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from harness import REPO_ROOT, unique_topic
from pyspark.sql import DataFrame, SparkSession

from pulsar_state import PulsarMap
from pulsar_state.cluster_auth import ClusterAuth
from pulsar_state.connectors.spark_source import PulsarStateDataSource
from pulsar_state.deploy.standalone import StandaloneBroker
from pulsar_state.deploy.token_auth import TokenAuthority

TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"


@dataclass
class CertBroker:
    service_url: str  # pulsar+ssl://
    admin_url: str  # https://
    ca_file: str
    cert_file: str  # the client certificate (CN = the super-user)
    key_file: str

    @property
    def auth_params(self) -> str:
        return f"tlsCertFile:{self.cert_file},tlsKeyFile:{self.key_file}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_pkcs8(key_pem: bytes, path: Path) -> None:
    key = serialization.load_pem_private_key(key_pem, password=None)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


@pytest.fixture(scope="module")
def cert_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CertBroker]:
    base = os.environ.get("PULSAR_STATE_TEST_DATA_DIR") or str(REPO_ROOT / ".pulsar" / "test")
    certs = tmp_path_factory.mktemp("spark-tls-client-auth")
    ca = trustme.CA(key_type=trustme.KeyType.RSA)
    server = ca.issue_cert("127.0.0.1", "localhost", key_type=trustme.KeyType.RSA)
    authority = TokenAuthority()
    user = ca.issue_cert("admin", common_name=authority.superuser, key_type=trustme.KeyType.RSA)
    ca_file = certs / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    server.cert_chain_pems[0].write_to_path(str(certs / "broker.pem"))
    _write_pkcs8(server.private_key_pem.bytes(), certs / "broker.key")  # the broker reads PKCS#8
    user.cert_chain_pems[0].write_to_path(str(certs / "client.pem"))
    _write_pkcs8(user.private_key_pem.bytes(), certs / "client.key")
    binary_port, web_port = _free_port(), _free_port()
    settings = authority.broker_settings()
    settings.update(
        {
            "authenticationProviders": f"{TLS_PROVIDER},{settings['authenticationProviders']}",
            "brokerServicePortTls": str(binary_port),
            "webServicePortTls": str(web_port),
            "tlsCertificateFilePath": str(certs / "broker.pem"),
            "tlsKeyFilePath": str(certs / "broker.key"),
            "tlsTrustCertsFilePath": str(ca_file),
        }
    )
    broker = StandaloneBroker(
        data_dir=Path(base + "-spark-tls-client-auth"),
        functions=False,
        broker_settings=settings,
        admin_token=authority.superuser_token,
    )
    broker.stop()
    broker.start(fresh=True)
    try:
        yield CertBroker(
            service_url=f"pulsar+ssl://127.0.0.1:{binary_port}",
            admin_url=f"https://127.0.0.1:{web_port}",
            ca_file=str(ca_file),
            cert_file=str(certs / "client.pem"),
            key_file=str(certs / "client.key"),
        )
    finally:
        broker.stop()


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
def written(cert_broker: CertBroker) -> tuple[str, dict[str, Any]]:
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


def _read(spark: SparkSession, broker: CertBroker, topic: str, **options: str) -> DataFrame:
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
    spark: SparkSession, cert_broker: CertBroker, written: tuple[str, dict[str, Any]]
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
    spark: SparkSession, cert_broker: CertBroker, written: tuple[str, dict[str, Any]]
) -> None:
    topic, _ = written
    with pytest.raises(Exception) as refused:  # Spark wraps the source's PermissionError
        _read(spark, cert_broker, topic).collect()
    text = str(refused.value)
    assert "PermissionError" in text, text
    assert "authPlugin" in text, text
