"""TLS client authentication: a standalone whose admin API and binary protocol, over
TLS, take a client certificate as the credentials (``AuthenticationProviderTls``).

The certificate's common name is the role (here the super-user ``admin``). A
client that shows none is anonymous and refused. ``pulsar-state --auth-plugin tls
--auth-params tlsCertFile:...,tlsKeyFile:...`` and the core's one admin endpoint
(:class:`pulsar_state.AdminEndpoint`, built by ``ClusterAuth.admin_endpoint``)
must send the certificate on every admin call, as ``pulsar-admin`` does.

The broker also takes tokens, on the plain listeners only for itself: its own
internal client and the launcher's readiness check authenticate with the
super-user's token (``TokenAuthority``); the tests below use certificates only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from harness import pulsar_state_cli, unique_topic
from tls_brokers import ClientAuthBroker, client_auth_standalone

from pulsar_state import (
    AdminEndpoint,
    MetadataStore,
    PermissionDeniedError,
    PulsarMap,
)
from pulsar_state.connectors.sink_runner import run_sink
from pulsar_state.topic_names import admin_path


@pytest.fixture(scope="module")
def cert_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientAuthBroker]:
    with client_auth_standalone(tmp_path_factory.mktemp("tls-client-auth"), "tls-client-auth") as b:
        yield b


def test_the_broker_takes_the_client_certificate_and_refuses_anonymous_admin_calls(
    cert_broker: ClientAuthBroker,
) -> None:
    url = f"{cert_broker.admin_url}/admin/v2/tenants"
    anonymous = requests.get(url, verify=cert_broker.ca_file, timeout=30)
    assert anonymous.status_code == 401, anonymous.text
    with_cert = requests.get(
        url,
        verify=cert_broker.ca_file,
        cert=(cert_broker.cert_file, cert_broker.key_file),
        timeout=30,
    )
    assert with_cert.status_code == 200, with_cert.text


def _cli(cert_broker: ClientAuthBroker, *args: str, cert: bool = True) -> list[str]:
    return [
        *args[:3],
        "--service-url",
        cert_broker.service_url,
        "--admin-url",
        cert_broker.admin_url,
        "--tls-trust-cert-path",
        cert_broker.ca_file,
        *(cert_broker.auth_args() if cert else []),
        *args[3:],
    ]


def _run(cert_broker: ClientAuthBroker, *args: str, cert: bool = True) -> tuple[int, str, str]:
    done = pulsar_state_cli(
        *_cli(cert_broker, *args, cert=cert), env={}, drop=("PULSAR_", "REQUESTS_CA")
    )
    return done.returncode, done.stdout, done.stderr


def test_the_cli_writes_and_reads_with_a_client_certificate(
    cert_broker: ClientAuthBroker,
) -> None:
    topic = unique_topic("cert-cli")
    code, _, err = _run(cert_broker, "map", "--topic", topic, "put", "k", "41")
    assert code == 0, err
    code, out, err = _run(cert_broker, "map", "--topic", topic, "get", "k")
    assert (code, out.strip()) == (0, "41"), err
    code, out, err = _run(cert_broker, "map", "--topic", topic, "dump")
    assert code == 0 and "41" in out, err
    meta = unique_topic("cert-cli-meta")
    code, _, err = _run(cert_broker, "meta", "--topic", meta, "put", "/a", "v")
    assert code == 0, err
    code, out, err = _run(cert_broker, "meta", "--topic", meta, "get", "/a")
    assert code == 0 and "v" in out, err


def test_the_cli_without_the_client_certificate_fails_clearly(
    cert_broker: ClientAuthBroker,
) -> None:
    topic = unique_topic("cert-cli-anon")
    code, _, err = _run(cert_broker, "map", "--topic", topic, "put", "k", "1", cert=False)
    assert code == 1, err
    assert "Traceback" not in err, err
    assert "401" in err and "client certificate" in err, err


def _retention(cert_broker: ClientAuthBroker, topic: str) -> object:
    resp = requests.get(
        f"{cert_broker.admin_url}/admin/v2/{admin_path(topic)}/retention",
        params={"applied": "false"},
        verify=cert_broker.ca_file,
        cert=(cert_broker.cert_file, cert_broker.key_file),
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_a_map_and_a_store_with_the_admin_endpoint_protect_write_and_read(
    cert_broker: ClientAuthBroker,
) -> None:
    endpoint = cert_broker.auth.admin_endpoint(cert_broker.admin_url)
    assert endpoint.client_cert == (cert_broker.cert_file, cert_broker.key_file)
    topic = unique_topic("cert-map")
    client = cert_broker.client()
    try:
        with PulsarMap[str, int](client, topic, admin=endpoint) as m:
            m.put("a", 1).result(60)
            assert m.get("a", latest=True).result(60) == 1
        assert _retention(cert_broker, topic) == {
            "retentionTimeInMinutes": -1,
            "retentionSizeInMB": -1,
        }
        with PulsarMap[str, int](client, topic, admin=endpoint) as again:
            assert again.get("a").result(60) == 1
        with MetadataStore(client, unique_topic("cert-meta"), admin=endpoint) as store:
            store.put("/x", b"1", -1).result(60)
            got = store.get("/x").result(60)
            assert got is not None and got.value == b"1"
    finally:
        client.close()


def test_a_map_whose_endpoint_has_no_client_certificate_is_refused_clearly(
    cert_broker: ClientAuthBroker,
) -> None:
    client = cert_broker.client()
    try:
        bare = AdminEndpoint(url=cert_broker.admin_url, tls_trust_cert_path=cert_broker.ca_file)
        with pytest.raises(PermissionDeniedError, match="401") as refused:
            PulsarMap[str, int](client, unique_topic("cert-anon"), admin=bare)
        assert "client certificate" in str(refused.value)
    finally:
        client.close()


def test_the_sink_runner_sends_the_client_certificate_on_its_admin_calls(
    cert_broker: ClientAuthBroker, tmp_path: Path
) -> None:
    """The runner's metadata map protects its topic and its position check reads the
    topic's ledgers: both admin calls, both with the certificate of --auth-plugin tls."""
    topic = unique_topic("cert-sink")
    client = cert_broker.client()
    try:
        producer = client.create_producer(topic)
        producer.send(b"v1", partition_key="k1")
        producer.close()
    finally:
        client.close()
    config = {
        "serviceUrl": cert_broker.service_url,
        "topic": topic,
        "subscription": "first",
        "database": str(tmp_path / "sink.db"),
        "adminUrl": cert_broker.admin_url,
        "metadataTopic": f"{topic}-metadata",
    }
    stop = threading.Event()
    timer = threading.Timer(90, stop.set)  # bound: a check that never succeeds retries
    timer.start()
    try:
        assert run_sink(config, max_idle_s=2, stop=stop, auth=cert_broker.auth).written == 1
        again = run_sink(
            {**config, "subscription": "second"}, max_idle_s=2, stop=stop, auth=cert_broker.auth
        )
        assert not stop.is_set(), "the runner kept retrying the position check"
        assert (again.written, again.skipped) == (0, 1)
        assert again.position_checks == {"redelivery": 1}
    finally:
        timer.cancel()
