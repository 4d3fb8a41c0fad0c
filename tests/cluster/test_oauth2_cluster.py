"""OAuth 2.0 client credentials against the real cluster (issue #28).

A local issuer (a stub speaking OAuth 2.0 discovery and the
``client_credentials`` grant) hands out JWTs the cluster's brokers accept
(signed with the cluster's token key). The CLI, given only
``--auth-plugin oauth2`` and the issuer's parameters, writes and reads a map
through the broker that does not own the topic: the Pulsar client runs the
flow itself, the admin calls get their bearer token from the same issuer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs

import pytest
from cluster_access import created_on_one
from harness import pulsar_state_cli
from http_stub import reply_json, serving

from pulsar_state.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def issuer(local_cluster: EmbeddedCluster) -> Iterator[tuple[str, list[str]]]:
    """The issuer's URL, and the client ids it granted a token."""
    granted: list[str] = []
    token = local_cluster.superuser_token or ""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            host = self.headers.get("Host")
            reply_json(
                self, 200, {"issuer": f"http://{host}", "token_endpoint": f"http://{host}/token"}
            )

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            if (form.get("client_id"), form.get("client_secret")) != ("svc", "s3cret"):
                reply_json(self, 401, {"error": "invalid_client"})
                return
            granted.append(form["client_id"])
            reply_json(
                self, 200, {"access_token": token, "token_type": "Bearer", "expires_in": 3600}
            )

        def log_message(self, *_: object) -> None:
            pass

    with serving(Handler) as url:
        yield url, granted


def test_the_cli_with_oauth2_through_the_non_owner(
    local_cluster: EmbeddedCluster, issuer: tuple[str, list[str]]
) -> None:
    url, granted = issuer
    topic, elsewhere = created_on_one(local_cluster, "oauth2-cli")
    env = {"PULSAR_SERVICE_URL": local_cluster.service_url, "PULSAR_ADMIN_URL": elsewhere}
    params = json.dumps({"issuerUrl": url, "clientId": "svc", "clientSecret": "s3cret"})
    auth = ["--auth-plugin", "oauth2", "--auth-params", params]
    put = pulsar_state_cli("map", "--topic", topic, *auth, "put", "k", "7", env=env)
    assert put.returncode == 0, put.stderr
    got = pulsar_state_cli("map", "--topic", topic, *auth, "get", "k", env=env)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "7"
    assert granted and set(granted) == {"svc"}
    # wrong credentials: refused by the issuer, said so
    bad = json.dumps({"issuerUrl": url, "clientId": "svc", "clientSecret": "nope"})
    refused = pulsar_state_cli(
        "map",
        "--topic",
        topic,
        "--auth-plugin",
        "oauth2",
        "--auth-params",
        bad,
        "get",
        "k",
        env=env,
    )
    assert refused.returncode != 0
    assert "refused client 'svc'" in refused.stderr or "401" in refused.stderr, refused.stderr
