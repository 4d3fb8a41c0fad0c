"""Private TLS standalones for the fault tests, one per test module.

:func:`tls_standalone`: the binary protocol and the admin API over TLS only,
with a certificate signed by a throwaway CA (``trustme``), so nothing trusts it
by default. :func:`client_auth_standalone`: the same, taking a TLS client
certificate as the credentials (``AuthenticationProviderTls``); the
certificate's common name is the super-user's role, and the broker's own
internal client authenticates with the super-user's token (``TokenAuthority``).
Each starts fresh in its own data directory (``PULSAR_STATE_TEST_DATA_DIR`` +
``-<name>``) on free ports, and stops on exit.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import trustme
from cryptography.hazmat.primitives import serialization
from harness import session_data_dir

from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.deploy.standalone import StandaloneBroker
from pulsar_state.deploy.token_auth import TokenAuthority

TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"


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


@dataclass
class ClientAuthBroker(TlsBroker):
    cert_file: str  # the client certificate (CN = the super-user)
    key_file: str

    @property
    def auth_params(self) -> str:
        return f"tlsCertFile:{self.cert_file},tlsKeyFile:{self.key_file}"

    @property
    def auth(self) -> ClusterAuth:
        return ClusterAuth(
            auth_plugin="tls", auth_params=self.auth_params, tls_trust_cert_path=self.ca_file
        )

    def client(self, *, trusted: bool = True) -> pulsar.Client:
        """A client showing the certificate (``trusted``: and trusting the CA)."""
        kwargs = self.auth.client_kwargs()
        if not trusted:
            kwargs.pop("tls_trust_certs_file_path", None)
        return pulsar.Client(
            self.service_url,
            operation_timeout_seconds=10,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
            **kwargs,
        )

    def auth_args(self) -> list[str]:
        return ["--auth-plugin", "tls", "--auth-params", self.auth_params]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_pkcs8(key_pem: bytes, path: Path) -> None:
    """The broker reads PKCS#8 keys only."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


@contextmanager
def _standalone(
    certs: Path, name: str, ca: trustme.CA, settings: dict[str, str], admin_token: str | None
) -> Iterator[tuple[str, str]]:
    """A fresh standalone serving TLS with a certificate of ``ca``; its URLs."""
    server = ca.issue_cert("127.0.0.1", "localhost", key_type=trustme.KeyType.RSA)
    ca.cert_pem.write_to_path(str(certs / "ca.pem"))
    server.cert_chain_pems[0].write_to_path(str(certs / "broker.pem"))
    _write_pkcs8(server.private_key_pem.bytes(), certs / "broker.key")
    binary_port, web_port = free_port(), free_port()
    base = str(session_data_dir())
    broker = StandaloneBroker(
        data_dir=Path(f"{base}-{name}"),
        functions=False,
        broker_settings={
            **settings,
            "brokerServicePortTls": str(binary_port),
            "webServicePortTls": str(web_port),
            "tlsCertificateFilePath": str(certs / "broker.pem"),
            "tlsKeyFilePath": str(certs / "broker.key"),
            "tlsTrustCertsFilePath": str(certs / "ca.pem"),
        },
        admin_token=admin_token,
    )
    broker.stop()
    broker.start(fresh=True)
    try:
        yield f"pulsar+ssl://127.0.0.1:{binary_port}", f"https://127.0.0.1:{web_port}"
    finally:
        broker.stop()


@contextmanager
def tls_standalone(certs: Path, name: str) -> Iterator[TlsBroker]:
    """A standalone on TLS only (see the module docstring); its files in ``certs``."""
    ca = trustme.CA(key_type=trustme.KeyType.RSA)
    with _standalone(certs, name, ca, {}, None) as (service_url, admin_url):
        yield TlsBroker(service_url, admin_url, str(certs / "ca.pem"))


@contextmanager
def client_auth_standalone(certs: Path, name: str) -> Iterator[ClientAuthBroker]:
    """A TLS standalone taking client certificates (see the module docstring)."""
    ca = trustme.CA(key_type=trustme.KeyType.RSA)
    authority = TokenAuthority()
    user = ca.issue_cert("admin", common_name=authority.superuser, key_type=trustme.KeyType.RSA)
    user.cert_chain_pems[0].write_to_path(str(certs / "client.pem"))
    _write_pkcs8(user.private_key_pem.bytes(), certs / "client.key")
    settings: dict[str, Any] = authority.broker_settings()
    settings["authenticationProviders"] = f"{TLS_PROVIDER},{settings['authenticationProviders']}"
    with _standalone(certs, name, ca, settings, authority.superuser_token) as urls:
        yield ClientAuthBroker(
            urls[0],
            urls[1],
            str(certs / "ca.pem"),
            cert_file=str(certs / "client.pem"),
            key_file=str(certs / "client.key"),
        )
