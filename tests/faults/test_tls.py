"""TLS: a standalone that serves the binary protocol and the admin API over TLS.

The broker's certificate is signed by a private CA (``trustme``), so nothing
trusts it by default: each entry point must be told to, the way ``pulsar-admin``
and ``pulsar-client`` spell it (``--tls-trust-cert-path``, env
``PULSAR_TLS_TRUST_CERT_PATH``; in code, the client's
``tls_trust_certs_file_path`` and the core's ``admin_tls_trust_cert_path``), and
one that is not must fail with a clear message, never hang or change anything.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest
import requests
import trustme
from cryptography.hazmat.primitives import serialization
from harness import REPO_ROOT, unique_topic

from pulsar_state import ConfigurationError, MetadataStore, PulsarMap, PulsarStateError
from pulsar_state.deploy.standalone import StandaloneBroker


@dataclass
class TlsBroker:
    service_url: str  # pulsar+ssl://
    admin_url: str  # https://
    ca_file: str

    def client(self, *, trusted: bool = True) -> pulsar.Client:
        return pulsar.Client(
            self.service_url,
            tls_trust_certs_file_path=self.ca_file if trusted else None,
            operation_timeout_seconds=10,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    base = os.environ.get("PULSAR_STATE_TEST_DATA_DIR") or str(REPO_ROOT / ".pulsar" / "test")
    certs = tmp_path_factory.mktemp("tls")
    ca = trustme.CA(key_type=trustme.KeyType.RSA)
    server = ca.issue_cert("127.0.0.1", "localhost", key_type=trustme.KeyType.RSA)
    ca_file, cert_file, key_file = certs / "ca.pem", certs / "broker.pem", certs / "broker.key"
    ca.cert_pem.write_to_path(str(ca_file))
    server.cert_chain_pems[0].write_to_path(str(cert_file))
    # the broker reads PKCS#8 keys
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), password=None)
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    binary_port, web_port = _free_port(), _free_port()
    broker = StandaloneBroker(
        data_dir=Path(base + "-tls"),
        functions=False,
        broker_settings={
            "brokerServicePortTls": str(binary_port),
            "webServicePortTls": str(web_port),
            "tlsCertificateFilePath": str(cert_file),
            "tlsKeyFilePath": str(key_file),
            "tlsTrustCertsFilePath": str(ca_file),
        },
    )
    broker.stop()
    broker.start(fresh=True)
    try:
        yield TlsBroker(
            service_url=f"pulsar+ssl://127.0.0.1:{binary_port}",
            admin_url=f"https://127.0.0.1:{web_port}",
            ca_file=str(ca_file),
        )
    finally:
        broker.stop()


def test_the_admin_api_and_the_broker_really_speak_tls(tls_broker: TlsBroker) -> None:
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{tls_broker.admin_url}/admin/v2/clusters", timeout=30)
    listed = requests.get(
        f"{tls_broker.admin_url}/admin/v2/clusters", verify=tls_broker.ca_file, timeout=30
    )
    assert listed.status_code == 200, listed.text


def test_the_core_over_tls_with_the_trusted_ca(tls_broker: TlsBroker) -> None:
    topic = unique_topic("tls")
    client = tls_broker.client()
    try:
        with PulsarMap[str, int](
            client,
            topic,
            admin_url=tls_broker.admin_url,
            admin_tls_trust_cert_path=tls_broker.ca_file,
        ) as m:
            m.put("a", 1).result(60)
            assert m.get("a", latest=True).result(60) == 1
        with MetadataStore(
            client,
            unique_topic("tls-meta"),
            admin_url=tls_broker.admin_url,
            admin_tls_trust_cert_path=tls_broker.ca_file,
        ) as store:
            store.put("/x", b"1", -1).result(60)
            got = store.get("/x").result(60)
            assert got is not None and got.value == b"1"
    finally:
        client.close()


def test_the_core_refuses_an_admin_url_it_cannot_trust(tls_broker: TlsBroker) -> None:
    client = tls_broker.client()
    try:
        with pytest.raises(PulsarStateError, match="certificate") as refused:
            PulsarMap[str, int](
                client, unique_topic("tls-untrusted"), admin_url=tls_broker.admin_url
            )
        assert tls_broker.admin_url in str(refused.value)
        with pytest.raises(ConfigurationError, match="is not a file"):
            PulsarMap[str, int](
                client,
                unique_topic("tls-nofile"),
                admin_url=tls_broker.admin_url,
                admin_tls_trust_cert_path="/nonexistent/ca.pem",
            )
    finally:
        client.close()


def _cli(tls_broker: TlsBroker, *args: str, trust: bool = True) -> subprocess.CompletedProcess[str]:
    """``pulsar-state`` as a user runs it against the TLS listeners (env settings)."""
    env = {
        **os.environ,
        "PULSAR_SERVICE_URL": tls_broker.service_url,
        "PULSAR_ADMIN_URL": tls_broker.admin_url,
    }
    env.pop("PULSAR_TLS_TRUST_CERT_PATH", None)
    if trust:
        env["PULSAR_TLS_TRUST_CERT_PATH"] = tls_broker.ca_file
    return subprocess.run(
        [str(Path(sys.executable).parent / "pulsar-state"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_cli_writes_and_reads_over_tls(tls_broker: TlsBroker) -> None:
    topic = unique_topic("tls-cli")
    put = _cli(tls_broker, "map", "--topic", topic, "put", "k", "41")
    assert put.returncode == 0, put.stderr
    got = _cli(tls_broker, "map", "--topic", topic, "get", "k")
    assert (got.returncode, got.stdout.strip()) == (0, "41"), got.stderr
    flagged = subprocess.run(
        [
            str(Path(sys.executable).parent / "pulsar-state"),
            "meta",
            "--topic",
            unique_topic("tls-cli-meta"),
            "--service-url",
            tls_broker.service_url,
            "--admin-url",
            tls_broker.admin_url,
            "--tls-trust-cert-path",
            tls_broker.ca_file,
            "put",
            "/a",
            "v",
        ],
        env={k: v for k, v in os.environ.items() if not k.startswith("PULSAR_")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert flagged.returncode == 0, flagged.stderr


def test_the_cli_without_the_ca_fails_clearly(tls_broker: TlsBroker) -> None:
    topic = unique_topic("tls-cli-untrusted")
    put = _cli(tls_broker, "map", "--topic", topic, "put", "k", "1", trust=False)
    assert put.returncode == 1, put.stderr
    assert "Traceback" not in put.stderr
    assert "certificate" in put.stderr.lower() or "tls" in put.stderr.lower(), put.stderr
