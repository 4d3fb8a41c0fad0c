"""Issue #27 over TLS: on the two-broker cluster started with ``tls=True`` and token
authentication, the library works through the ``https://`` admin URL of the broker
that does NOT own the topic and the ``pulsar+ssl://`` service URL, with a token or
with a TLS client certificate instead.

Over TLS the non-owner answers a topic-level admin call with 307 to the owner's
``https://`` URL; :class:`~pulsar_state.cluster.session.ClusterSession` follows it
with the caller's credentials (the ``Authorization`` header, or the client
certificate) and trust (the cluster's CA). Each test first checks that its admin
URL is the non-owner's and that the broker really redirects there, so that a
redirect is taken, not assumed; each then reads back what it wrote.
"""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
import requests
from cluster_access import created_on_one
from harness import pulsar_state_cli, unique_name, unique_topic, wait_until
from map_round_trip import write_read_checkpoint

from pulsar_state.cluster.admin import topic_path
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(900)

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def _ca(cluster: EmbeddedCluster) -> str:
    assert cluster.ca_file is not None, "the session's cluster runs without TLS"
    return cluster.ca_file


def _tls_non_owner(cluster: EmbeddedCluster, prefix: str) -> tuple[str, str, str]:
    """A new topic, and the https admin URL of the broker that does not own it and
    the owner's, after checking that the former redirects to the latter."""
    topic, elsewhere = created_on_one(cluster, prefix)
    index = cluster.admin_urls.index(elsewhere)
    via, owner = cluster.tls_admin_urls[index], cluster.tls_admin_urls[1 - index]
    assert via.startswith("https://") and owner.startswith("https://")
    answer = requests.get(
        f"{via}/admin/v2/{topic_path(topic)}/stats",
        headers={"Authorization": f"Bearer {cluster.superuser_token}"},
        verify=_ca(cluster),
        timeout=60,
        allow_redirects=False,
    )
    assert answer.status_code == 307, answer.text
    assert answer.headers["Location"].startswith(f"{owner}/"), answer.headers["Location"]
    return topic, via, owner


def _cert_auth(cluster: EmbeddedCluster) -> ClusterAuth:
    """The super-user's TLS client certificate as the only credentials."""
    cert, key = cluster.client_cert("admin")
    return ClusterAuth(
        auth_plugin="tls",
        auth_params=f"tlsCertFile:{cert},tlsKeyFile:{key}",
        tls_trust_cert_path=_ca(cluster),
    )


@pytest.fixture
def tls_client(local_cluster: EmbeddedCluster) -> Iterator[pulsar.Client]:
    """A client of every broker's ``pulsar+ssl://`` URL with the super-user's token."""
    assert local_cluster.tls_service_url is not None
    client = pulsar.Client(
        local_cluster.tls_service_url,
        authentication=pulsar.AuthenticationToken(local_cluster.superuser_token),
        tls_trust_certs_file_path=_ca(local_cluster),
        operation_timeout_seconds=60,
        logger=QUIET,
    )
    try:
        yield client
    finally:
        client.close()


def test_the_cluster_serves_tls_and_names_it(local_cluster: EmbeddedCluster) -> None:
    assert [url.split("://")[0] for url in local_cluster.tls_admin_urls] == ["https", "https"]
    assert (local_cluster.tls_service_url or "").startswith("pulsar+ssl://")
    done = pulsar_state_cli(
        "cluster", "status", "--data-dir", str(local_cluster.cluster.data_dir), env={}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for url in local_cluster.tls_admin_urls:
        assert url in done.stdout
    assert f"tls_service_url={local_cluster.tls_service_url}" in done.stdout
    assert f"ca_file={local_cluster.ca_file}" in done.stdout


def test_a_map_with_a_token_through_the_https_non_owner(
    local_cluster: EmbeddedCluster, tls_client: pulsar.Client
) -> None:
    topic, via, _ = _tls_non_owner(local_cluster, "tls-token-map")
    endpoint = AdminEndpoint(
        url=via,
        headers={"Authorization": f"Bearer {local_cluster.superuser_token}"},
        tls_trust_cert_path=_ca(local_cluster),
    )
    write_read_checkpoint(tls_client, topic, endpoint)


def test_a_client_certificate_alone_authenticates_through_the_https_non_owner(
    local_cluster: EmbeddedCluster,
) -> None:
    topic, via, owner = _tls_non_owner(local_cluster, "tls-cert-raw")
    auth = _cert_auth(local_cluster)
    cert = auth.admin_client_cert()
    url = f"{via}/admin/v2/{topic_path(topic)}/stats"
    anonymous = requests.get(url, verify=_ca(local_cluster), timeout=60, allow_redirects=False)
    assert anonymous.status_code == 401, anonymous.text
    first = requests.get(
        url, cert=cert, verify=_ca(local_cluster), timeout=60, allow_redirects=False
    )
    assert first.status_code == 307, first.text
    assert first.headers["Location"].startswith(f"{owner}/")
    # the library's session follows it with the certificate
    stats = auth.admin_endpoint(via).admin().stats(topic)
    assert "subscriptions" in stats


def test_a_map_with_a_client_certificate_through_the_https_non_owner(
    local_cluster: EmbeddedCluster,
) -> None:
    topic, via, _ = _tls_non_owner(local_cluster, "tls-cert-map")
    auth = _cert_auth(local_cluster)
    endpoint = auth.admin_endpoint(via)
    assert endpoint.headers is None and endpoint.client_cert is not None  # no token anywhere
    assert auth.token() is None
    client = pulsar.Client(
        local_cluster.tls_service_url or "",
        operation_timeout_seconds=60,
        logger=QUIET,
        **auth.client_kwargs(),
    )
    try:
        write_read_checkpoint(client, topic, endpoint)
    finally:
        client.close()


@pytest.mark.parametrize("credentials", ["client-cert", "token"])
def test_the_cli_over_tls_through_the_https_non_owner(
    local_cluster: EmbeddedCluster, credentials: str
) -> None:
    topic, via, _ = _tls_non_owner(local_cluster, f"tls-cli-{credentials}")
    if credentials == "client-cert":
        cert, key = local_cluster.client_cert("admin")
        auth = ["--auth-plugin", "tls", "--auth-params", f"tlsCertFile:{cert},tlsKeyFile:{key}"]
    else:
        auth = ["--auth-token", local_cluster.superuser_token or ""]
    options = [
        "--service-url",
        local_cluster.tls_service_url or "",
        "--admin-url",
        via,
        "--tls-trust-cert-path",
        _ca(local_cluster),
        *auth,
    ]

    def cli(*args: str) -> tuple[int, str, str]:
        done = pulsar_state_cli(
            "map", "--topic", topic, *options, *args, env={}, drop=("PULSAR_", "REQUESTS_CA")
        )
        return done.returncode, done.stdout, done.stderr

    code, _, err = cli("put", "colour", '"blue"')
    assert code == 0, err
    code, out, err = cli("put", "size", "3")
    assert code == 0, err
    code, out, err = cli("get", "colour")
    assert (code, out.strip()) == (0, '"blue"'), err
    code, out, err = cli("ls")
    assert (code, out.split()) == (0, ["colour", "size"]), err
    assert "401" not in err and "redirect" not in err.lower(), err


def test_a_client_certificate_s_role_is_its_common_name(local_cluster: EmbeddedCluster) -> None:
    """A certificate of another role than the super-user's is that role: refused
    until the super-user grants it, then let through."""
    role = unique_name("tls-app")
    cert, key = local_cluster.client_cert(role)
    permissions = (
        f"{local_cluster.admin_urls[0]}/admin/v2/namespaces/public/default/permissions/{role}"
    )
    bearer = {"Authorization": f"Bearer {local_cluster.superuser_token}"}
    client = pulsar.Client(
        local_cluster.tls_service_url or "",
        authentication=pulsar.AuthenticationTLS(cert, key),
        tls_trust_certs_file_path=_ca(local_cluster),
        operation_timeout_seconds=10,
        logger=QUIET,
    )
    topic = unique_topic("tls-role")
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
        granted = requests.post(permissions, headers=bearer, json=["produce"], timeout=30)
        assert granted.status_code == 204, granted.text
        producer = wait_until(
            lambda: _producer(client, topic),
            timeout_s=30,
            message="a producer of the granted role's certificate",
        )
        producer.send(b"granted")
        producer.close()
    finally:
        client.close()
        requests.delete(permissions, headers=bearer, timeout=30)


def _producer(client: pulsar.Client, topic: str) -> pulsar.Producer | None:
    try:
        return client.create_producer(topic)
    except pulsar.AuthorizationError:
        return None
