"""OAuth 2.0 client credentials for the admin calls (issue #28), against a local issuer.

The issuer here is a stub HTTP server speaking the two requests the flow needs
(discovery and the ``client_credentials`` grant); tests/cluster/ runs the same
flow against a real cluster, whose brokers accept the issuer's tokens.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs

import pytest
import requests
from http_stub import reply_json, serving

from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.cluster.oauth2 import ClientCredentials, OAuth2Params
from pulsar_state.errors import ConfigurationError, PermissionDeniedError


class Issuer:
    def __init__(self, *, lifetime_s: float = 3600) -> None:
        self.lifetime_s = lifetime_s
        self.grants: list[dict[str, str]] = []
        self.url = ""
        self.lock = threading.Lock()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    reply_json(self, 200, {"token_endpoint": f"{issuer.url}/oauth/token"})
                else:
                    reply_json(self, 404, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                with issuer.lock:
                    issuer.grants.append(form)
                    n = len(issuer.grants)
                if form.get("client_secret") != "s3cret":
                    reply_json(self, 401, {"error": "invalid_client"})
                    return
                reply_json(
                    self,
                    200,
                    {"access_token": f"token-{n}", "expires_in": issuer.lifetime_s},
                )

            def log_message(self, *_: object) -> None:
                pass

        return Handler


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    it = Issuer()
    with serving(it.handler()) as url:
        it.url = url
        yield it


def test_both_spellings_and_a_credentials_file(tmp_path: Path) -> None:
    creds = tmp_path / "credentials.json"
    creds.write_text(json.dumps({"client_id": "svc", "client_secret": "s3cret"}))
    java = OAuth2Params.parse(
        json.dumps({"issuerUrl": "https://i/", "privateKey": f"file://{creds}", "audience": "a"})
    )
    python = OAuth2Params.parse(
        json.dumps({"issuer_url": "https://i", "client_id": "svc", "client_secret": "s3cret"})
    )
    inline = base64.b64encode(creds.read_bytes()).decode()
    data = OAuth2Params.parse(
        json.dumps(
            {"issuer_url": "https://i", "private_key": f"data:application/json;base64,{inline}"}
        )
    )
    assert (java.issuer_url, java.client_id, java.audience) == ("https://i", "svc", "a")
    assert python.client_id == data.client_id == "svc"
    assert "s3cret" not in repr(java)
    assert json.loads(java.client_params())["issuer_url"] == "https://i"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("not json", "JSON"),
        ('{"issuer_url": "https://i"}', "miss client_id, client_secret"),
        ('{"issuer_url": "ftp://i", "client_id": "a", "client_secret": "b"}', "http"),
        ('{"issuer_url": "https://i", "private_key": "file:///nope.json"}', "cannot read"),
    ],
)
def test_bad_params_are_clear_errors(params: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        OAuth2Params.parse(params)


def test_the_token_is_fetched_once_and_sent_as_bearer(issuer: Issuer) -> None:
    params = OAuth2Params.parse(
        json.dumps(
            {
                "issuer_url": issuer.url,
                "client_id": "svc",
                "client_secret": "s3cret",
                "audience": "x",
            }
        )
    )
    auth = ClientCredentials(params)
    seen: list[str | None] = []

    class Api(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    with serving(Api) as api:
        for _ in range(3):
            assert requests.get(api, auth=auth, timeout=5).status_code == 200
    assert seen == ["Bearer token-1"] * 3
    assert len(issuer.grants) == 1 and auth.fetched == 1
    grant = issuer.grants[0]
    assert grant["grant_type"] == "client_credentials" and grant["audience"] == "x"


def test_a_token_about_to_expire_is_fetched_again(issuer: Issuer) -> None:
    issuer.lifetime_s = 30.5  # renewed 30 s before it expires: after 0.5 s
    params = OAuth2Params.parse(
        json.dumps({"issuer_url": issuer.url, "client_id": "svc", "client_secret": "s3cret"})
    )
    auth = ClientCredentials(params)
    first = auth.token()
    time.sleep(0.6)
    assert auth.token() != first and auth.fetched == 2


def test_refused_credentials_say_so(issuer: Issuer) -> None:
    params = OAuth2Params.parse(
        json.dumps({"issuer_url": issuer.url, "client_id": "svc", "client_secret": "wrong"})
    )
    with pytest.raises(PermissionDeniedError, match="refused client 'svc'"):
        ClientCredentials(params).token()


def test_the_cli_auth_gives_an_admin_endpoint_with_the_flow(issuer: Issuer) -> None:
    auth = ClusterAuth(
        auth_plugin="org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2",
        auth_params=json.dumps(
            {"issuerUrl": issuer.url, "clientId": "svc", "clientSecret": "s3cret"}
        ),
    )
    endpoint = auth.admin_endpoint("http://127.0.0.1:1")
    assert endpoint.headers is None
    credentials = endpoint.requests_auth()
    assert credentials is not None and credentials is endpoint.requests_auth()  # one per process
    assert credentials.token().startswith("token-")
    assert auth.client_authentication() is not None
