"""How to reach the Pulsar admin REST API: one value, passed whole through the core.

An :class:`AdminEndpoint` holds the admin URL and everything a call to it needs:
the credentials (an ``Authorization`` header for a token or basic auth, a TLS
client certificate for ``--auth-plugin tls``), the CA bundle that signs the
API's certificate, and whether certificates are checked at all. Build one from
a :class:`~pulsar_state.cluster.auth.ClusterAuth` with
``auth.admin_endpoint(url)``, or directly::

    AdminEndpoint(url="https://pulsar:8443", tls_trust_cert_path="/etc/ca.pem",
                  client_cert=("/etc/client.pem", "/etc/client.key"))

``PulsarMap``, ``SharedStateManager``, ``MetadataStore`` (and their asyncio
twins) take it as ``admin=``; ``admin_url="http://..."`` stays the shorthand for
an endpoint with nothing but a URL (:func:`resolve_admin`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsar_state.cluster.admin import PulsarAdmin, tls_verify
from pulsar_state.cluster.oauth2 import ClientCredentials, OAuth2Params, credentials_for
from pulsar_state.errors import ConfigurationError

__all__ = ["AdminEndpoint", "resolve_admin"]


@dataclass(frozen=True, kw_only=True)
class AdminEndpoint:
    """The admin REST API and how to call it.

    Attributes:
        url: ``http://host:port`` or ``https://host:port``.
        headers: headers sent with every call (``Authorization`` for a token or
            basic auth); left out of ``repr``.
        tls_trust_cert_path: the PEM bundle of the CA that signs the API's
            certificate (``None``: the system's trusted CAs).
        tls_allow_insecure: check no certificate at all (tests only; a WARNING
            says so once per process).
        client_cert: ``(certificate file, key file)`` of a TLS client certificate,
            sent with every call (``--auth-plugin tls``).
        oauth2: OAuth 2.0 client credentials (``--auth-plugin oauth2``): each call
            carries a bearer token from the issuer, fetched and renewed as needed
            (:mod:`pulsar_state.cluster.oauth2`).
    """

    url: str
    headers: Mapping[str, str] | None = field(default=None, repr=False, hash=False)
    tls_trust_cert_path: str | None = None
    tls_allow_insecure: bool = False
    client_cert: tuple[str, str] | None = None
    oauth2: OAuth2Params | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.oauth2 is not None and not isinstance(self.oauth2, OAuth2Params):
            raise ConfigurationError("oauth2 must be an OAuth2Params (OAuth2Params.parse(...))")
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise ConfigurationError(f"the admin URL must be http(s)://..., got {self.url!r}")
        if self.headers is not None:
            if not isinstance(self.headers, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.headers.items()
            ):
                raise ConfigurationError("admin headers must map str to str")
            object.__setattr__(self, "headers", dict(self.headers))
        # raises ConfigurationError for a missing trust file or a non-bool flag
        tls_verify(self.tls_trust_cert_path, allow_insecure=self.tls_allow_insecure)
        if self.tls_trust_cert_path is not None:
            object.__setattr__(self, "tls_trust_cert_path", str(self.tls_trust_cert_path))
        if self.client_cert is not None:
            if (
                not isinstance(self.client_cert, tuple)
                or len(self.client_cert) != 2
                or not all(isinstance(p, str | Path) for p in self.client_cert)
            ):
                raise ConfigurationError(
                    f"client_cert must be (certificate file, key file), got {self.client_cert!r}"
                )
            for path in self.client_cert:
                if not Path(path).is_file():
                    raise ConfigurationError(f"TLS client certificate file {path!r} is not a file")
            object.__setattr__(self, "client_cert", tuple(str(p) for p in self.client_cert))

    def verify(self) -> bool | str:
        """``requests``' ``verify`` (:func:`pulsar_state.cluster.admin.tls_verify`)."""
        return tls_verify(self.tls_trust_cert_path, allow_insecure=self.tls_allow_insecure)

    def requests_auth(self) -> ClientCredentials | None:
        """The ``requests`` authentication of the OAuth 2.0 credentials (one token
        shared by the process), or ``None``."""
        if self.oauth2 is None:
            return None
        return credentials_for(self.oauth2, verify=self.verify())

    def with_url(self, url: str) -> AdminEndpoint:
        """The same credentials and trust for another admin URL."""
        return dataclasses.replace(self, url=url)

    def admin(self, *, timeout_s: float = 10.0, retry_s: float = 60.0) -> PulsarAdmin:
        """A :class:`~pulsar_state.cluster.admin.PulsarAdmin` that calls this endpoint
        (``timeout_s`` per attempt, idempotent calls retried for ``retry_s``)."""
        return PulsarAdmin(
            self.url,
            headers=dict(self.headers or {}),
            timeout_s=timeout_s,
            retry_s=retry_s,
            verify=self.verify(),
            cert=self.client_cert,
            auth=self.requests_auth(),
        )


def resolve_admin(
    admin_url: str | None,
    admin: AdminEndpoint | None,
    *,
    legacy: Mapping[str, Any] | None = None,
) -> AdminEndpoint | None:
    """The one endpoint of a constructor that takes ``admin_url=`` (the shorthand)
    and ``admin=`` (the whole value).

    ``legacy``: the deprecated separate keywords (``admin_headers``,
    ``admin_tls_trust_cert_path``, ``admin_tls_allow_insecure``) as given; any
    set one is folded into the endpoint with a :class:`DeprecationWarning`.

    Raises:
        ConfigurationError: both ``admin_url`` and ``admin`` given, ``admin`` not an
            :class:`AdminEndpoint`, or a deprecated keyword next to ``admin``.
    """
    if admin is not None and not isinstance(admin, AdminEndpoint):
        raise ConfigurationError(f"admin must be an AdminEndpoint, got {type(admin).__name__}")
    if admin_url is not None and not isinstance(admin_url, str):
        raise ConfigurationError(f"admin_url must be a str, got {type(admin_url).__name__}")
    if admin is not None and admin_url:
        raise ConfigurationError(
            "give either admin_url (a URL) or admin (an AdminEndpoint, which has the URL), not both"
        )
    given = {k: v for k, v in (legacy or {}).items() if v not in (None, False)}
    if given:
        if admin is not None:
            raise ConfigurationError(
                f"{', '.join(sorted(given))}: set these on the AdminEndpoint given as admin"
            )
        warnings.warn(
            f"{', '.join(sorted(given))} are deprecated: pass admin=AdminEndpoint(url=..., "
            "headers=..., tls_trust_cert_path=..., tls_allow_insecure=...) "
            "(ClusterAuth.admin_endpoint(url) builds one)",
            DeprecationWarning,
            stacklevel=3,
        )
    if admin is not None:
        return admin
    if not admin_url:
        return None
    return AdminEndpoint(
        url=admin_url,
        headers=given.get("admin_headers"),
        tls_trust_cert_path=given.get("admin_tls_trust_cert_path"),
        tls_allow_insecure=bool(given.get("admin_tls_allow_insecure", False)),
    )
