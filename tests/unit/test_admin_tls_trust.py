"""Both admin REST clients trust the CA they are given, even where the host sets
``REQUESTS_CA_BUNDLE`` (Debian and many container images do).

``requests`` lets ``REQUESTS_CA_BUNDLE`` override a *session's* ``verify``, so a
client that set only ``session.verify`` to a private CA failed with
``CERTIFICATE_VERIFY_FAILED`` on such hosts (found by ``tests/faults/test_tls.py``
on this machine). A local HTTPS server with a throwaway CA stands in for the
admin API: this is about the clients' TLS settings, not the broker.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import certifi
import pytest
import trustme

import pulsar_state.cluster.admin as admin_module
from pulsar_state import AdminUnreachableError, ConfigurationError
from pulsar_state.cluster.admin import PulsarAdmin
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.deploy.rest_admin import PulsarAdminRest


class _Admin(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"partitions": 0, "status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def https_admin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """An HTTPS server's URL and the PEM file of the CA that signed its certificate."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", certifi.where())  # as on many hosts
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Admin)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", str(ca_file)
    finally:
        server.shutdown()
        server.server_close()


def test_the_core_admin_client_trusts_the_given_ca(https_admin: tuple[str, str]) -> None:
    url, ca_file = https_admin
    admin = PulsarAdmin(url, verify=ca_file, retry_s=5)
    try:
        assert admin.request("GET", "/admin/v2/clusters").status_code == 200
    finally:
        admin.close()


def test_an_untrusted_certificate_fails_at_once_and_names_the_setting(
    https_admin: tuple[str, str],
) -> None:
    url, _ = https_admin
    admin = PulsarAdmin(url, retry_s=30)
    attempts: list[str] = []
    send = admin._session.request

    def counted(method: str, url: str, **kwargs: Any) -> Any:
        attempts.append(url)
        return send(method, url, **kwargs)

    admin._session.request = counted  # type: ignore[method-assign]
    try:
        with pytest.raises(AdminUnreachableError, match="tls_trust_cert_path"):
            admin.request("GET", "/admin/v2/clusters")
    finally:
        admin.close()
    # a certificate error is not retried for retry_s like a broker that is away
    assert len(attempts) == 1, attempts


def test_a_missing_trust_file_is_a_configuration_error() -> None:
    from pulsar_state.cluster.admin import tls_verify  # noqa: PLC0415

    with pytest.raises(ConfigurationError, match="is not a file"):
        tls_verify("/nonexistent/ca.pem")
    assert tls_verify(None) is True


def test_the_deploy_client_trusts_the_given_ca(https_admin: tuple[str, str]) -> None:
    url, ca_file = https_admin
    admin = PulsarAdminRest(admin_url=url, verify=ca_file, retry_s=1)
    try:
        assert admin.function_status(("public", "default", "f"))["status"] == "ok"
    finally:
        admin.close()


def test_allow_insecure_skips_the_check_and_says_so_once(
    https_admin: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``--tls-allow-insecure`` reaches both admin clients: no certificate checked, one
    WARNING per process, and no urllib3 ``InsecureRequestWarning`` on each request."""
    url, _ = https_admin
    monkeypatch.setattr(admin_module, "_insecure_said", False)
    auth = ClusterAuth(tls_allow_insecure=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an InsecureRequestWarning would fail the call
        with caplog.at_level(logging.WARNING, logger="pulsar_state.cluster.admin"):
            core = PulsarAdmin(url, verify=auth.requests_verify(), retry_s=5)
            deploy = PulsarAdminRest.with_auth(url, auth)
            try:
                assert core.request("GET", "/admin/v2/clusters").status_code == 200
                assert core.request("GET", "/admin/v2/clusters").status_code == 200
                assert deploy.function_status(("public", "default", "f"))["status"] == "ok"
            finally:
                core.close()
                deploy.close()
    said = [r for r in caplog.records if "not checked" in r.getMessage()]
    assert len(said) == 1, caplog.text
    with pytest.raises(ConfigurationError, match="must be a bool"):
        admin_module.tls_verify(None, allow_insecure="yes")  # type: ignore[arg-type]
