"""How a process authenticates to a cluster, and which TLS certificates it trusts.

:class:`ClusterAuth` holds what ``pulsar-admin`` and ``pulsar-client`` take as
``--auth-plugin`` / ``--auth-params`` (or this project's shorter
``--auth-token``) and ``--tls-trust-cert-path`` / ``--tls-allow-insecure`` /
``--tls-enable-hostname-verification``, and turns it into the Pulsar client's
arguments (:meth:`ClusterAuth.client_kwargs`) and the admin REST API's
(:meth:`ClusterAuth.admin_endpoint`: headers, client certificate and trust in
one :class:`~pulsar_state.cluster.endpoint.AdminEndpoint`).

Plugins, by their Java class name (as in ``client.conf``) or a short name:

* ``token`` (``org.apache.pulsar.client.impl.auth.AuthenticationToken``):
  params ``token:<jwt>``, ``file:///path/to/token`` or the bare JWT; the admin
  API gets ``Authorization: Bearer <jwt>``;
* ``basic`` (``...auth.AuthenticationBasic``): params
  ``{"userId": "...", "password": "..."}``; the admin API gets HTTP basic auth;
* ``tls`` (``...auth.AuthenticationTls``): params
  ``tlsCertFile:/path,tlsKeyFile:/path`` (or the JSON form); the admin API
  gets the same client certificate;
* ``oauth2`` (``...auth.oauth2.AuthenticationOAuth2``): the client-credentials
  flow, params as pulsar-admin and the Python client take them (JSON:
  ``issuer_url``, ``private_key`` or ``client_id``/``client_secret``,
  ``audience``, ``scope``; :mod:`pulsar_state.cluster.oauth2`); the admin API
  gets a bearer token from the issuer, renewed before it expires.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar

from pulsar_state.cluster.admin import tls_verify
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.cluster.oauth2 import OAuth2Params
from pulsar_state.errors import ConfigurationError

__all__ = ["ClusterAuth"]

_PLUGINS = {
    "token": "token",
    "org.apache.pulsar.client.impl.auth.authenticationtoken": "token",
    "basic": "basic",
    "org.apache.pulsar.client.impl.auth.authenticationbasic": "basic",
    "tls": "tls",
    "org.apache.pulsar.client.impl.auth.authenticationtls": "tls",
    "oauth2": "oauth2",
    "org.apache.pulsar.client.impl.auth.oauth2.authenticationoauth2": "oauth2",
}


_CLASSES = {
    "token": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
    "basic": "org.apache.pulsar.client.impl.auth.AuthenticationBasic",
    "tls": "org.apache.pulsar.client.impl.auth.AuthenticationTls",
    "oauth2": "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2",
}


def _key_values(params: str) -> dict[str, str]:
    """``k1:v1,k2:v2`` or a JSON object, as Pulsar's plugins accept their params."""
    text = params.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"auth params are not valid JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise ConfigurationError("auth params in JSON must be an object")
        return {str(k): str(v) for k, v in data.items()}
    pairs = {}
    for item in text.split(","):
        key, sep, value = item.partition(":")
        if not sep:
            raise ConfigurationError(f"auth params: expected key:value, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


@dataclass(frozen=True, kw_only=True)
class ClusterAuth:
    """Authentication and TLS trust for the Pulsar client and the admin API.

    Attributes:
        auth_token: a JWT (shorthand for ``auth_plugin="token"``).
        auth_plugin: a plugin's class name or short name (module docstring).
        auth_params: the plugin's parameters.
        tls_trust_cert_path: the CA bundle that signs the cluster's certificates.
        tls_allow_insecure: accept any server certificate (tests only).
        tls_hostname_verification: check the server's host name (the Pulsar
            client's default is not to; the admin API always checks it unless
            ``tls_allow_insecure``).
    """

    auth_token: str | None = None
    auth_plugin: str | None = None
    auth_params: str | None = None
    tls_trust_cert_path: str | None = None
    tls_allow_insecure: bool = False
    tls_hostname_verification: bool = False

    def __post_init__(self) -> None:
        if self.auth_token and self.auth_plugin:
            raise ConfigurationError("give either an auth token or an auth plugin, not both")
        if self.auth_plugin and _PLUGINS.get(self.auth_plugin.lower()) is None:
            raise ConfigurationError(
                f"unsupported auth plugin {self.auth_plugin!r}: use token, basic, tls or oauth2 "
                "(or their org.apache.pulsar.client.impl.auth class names)"
            )
        if self.auth_plugin and not self.auth_params:
            raise ConfigurationError(f"auth plugin {self.auth_plugin!r} needs auth params")
        if self.tls_trust_cert_path and not Path(self.tls_trust_cert_path).is_file():
            raise ConfigurationError(f"TLS trust cert {self.tls_trust_cert_path!r} is not a file")

    @classmethod
    def from_options(cls, opts: Mapping[str, Any]) -> ClusterAuth:
        """From the ``pulsar-state`` command options (``pulsar_state.cli.options.auth_options``)."""
        return cls(
            auth_token=opts.get("auth_token") or None,
            auth_plugin=opts.get("auth_plugin") or None,
            auth_params=opts.get("auth_params") or None,
            tls_trust_cert_path=opts.get("tls_trust_cert_path") or None,
            tls_allow_insecure=bool(opts.get("tls_allow_insecure")),
            tls_hostname_verification=bool(opts.get("tls_enable_hostname_verification")),
        )

    @property
    def kind(self) -> str | None:
        """``token``, ``basic``, ``tls``, ``oauth2`` or ``None`` (no authentication)."""
        if self.auth_token:
            return "token"
        return _PLUGINS[self.auth_plugin.lower()] if self.auth_plugin else None

    def token(self) -> str | None:
        """The JWT, for token authentication (read from ``file://`` params)."""
        if self.auth_token:
            return self.auth_token
        if self.kind != "token":
            return None
        params = (self.auth_params or "").strip()
        if params.startswith("token:"):
            return params[len("token:") :]
        if params.startswith("file://"):
            path = Path(params[len("file://") :])
            try:
                return path.read_text().strip()
            except OSError as exc:
                raise ConfigurationError(f"cannot read the token file {path}: {exc}") from None
        return params

    def client_authentication(self) -> pulsar.Authentication | None:
        kind = self.kind
        if kind is None:
            return None
        if kind == "token":
            return pulsar.AuthenticationToken(self.token())
        params = self.auth_params or ""
        if kind == "basic":
            user, password = self._basic()
            return pulsar.AuthenticationBasic(user, password)
        if kind == "tls":
            pairs = _key_values(params)
            try:
                return pulsar.AuthenticationTLS(pairs["tlsCertFile"], pairs["tlsKeyFile"])
            except KeyError as exc:
                raise ConfigurationError(f"tls auth params need {exc.args[0]}") from None
        return pulsar.AuthenticationOauth2(OAuth2Params.parse(params).client_params())

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``pulsar.Client`` for this authentication and trust."""
        kwargs: dict[str, Any] = {"authentication": self.client_authentication()}
        if self.tls_trust_cert_path:
            kwargs["tls_trust_certs_file_path"] = self.tls_trust_cert_path
        if self.tls_allow_insecure:
            kwargs["tls_allow_insecure_connection"] = True
        if self.tls_hostname_verification:
            kwargs["tls_validate_hostname"] = True
        return kwargs

    def admin_headers(self) -> dict[str, str] | None:
        """The admin REST API's ``Authorization`` header (``None``: none needed)."""
        kind = self.kind
        if kind == "token":
            return {"Authorization": f"Bearer {self.token()}"}
        if kind == "basic":
            user, password = self._basic()
            encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
            return {"Authorization": f"Basic {encoded}"}
        return None  # oauth2: a bearer token per call (admin_endpoint's oauth2)

    def _basic(self) -> tuple[str, str]:
        """User and password of basic params: Java's ``userId`` or the Python client's
        ``username``."""
        pairs = _key_values(self.auth_params or "")
        user = pairs.get("userId") or pairs.get("username")
        if not user or "password" not in pairs:
            raise ConfigurationError('basic auth params need "userId" and "password"')
        return user, pairs["password"]

    def admin_client_cert(self) -> tuple[str, str] | None:
        """The client certificate and key for the admin API, for TLS authentication."""
        if self.kind != "tls":
            return None
        pairs = _key_values(self.auth_params or "")
        try:
            return pairs["tlsCertFile"], pairs["tlsKeyFile"]
        except KeyError as exc:
            raise ConfigurationError(f"tls auth params need {exc.args[0]}") from None

    def admin_endpoint(self, url: str) -> AdminEndpoint:
        """How to reach the admin API at ``url`` with these credentials and this trust:
        the ``Authorization`` header (token, basic), the client certificate (tls), the
        CA bundle and the insecure flag, in one value.

        Raises:
            ConfigurationError: a bad URL, oauth2 parameters that do not parse, or a
                certificate, key or trust file that is not a file.
        """
        return AdminEndpoint(
            url=url,
            headers=self.admin_headers(),
            tls_trust_cert_path=self.tls_trust_cert_path,
            tls_allow_insecure=self.tls_allow_insecure,
            client_cert=self.admin_client_cert(),
            oauth2=OAuth2Params.parse(self.auth_params or "") if self.kind == "oauth2" else None,
        )

    def pulsar_admin_args(self) -> list[str]:
        """The same settings as ``pulsar-admin``'s global options."""
        args = []
        kind = self.kind
        if kind is not None:
            params = f"token:{self.token()}" if kind == "token" else (self.auth_params or "")
            args += ["--auth-plugin", _CLASSES[kind], "--auth-params", params]
        if self.tls_trust_cert_path:
            args += ["--tls-trust-cert-path", self.tls_trust_cert_path]
        if self.tls_allow_insecure:
            args.append("--tls-allow-insecure")
        if self.tls_hostname_verification:
            args.append("--tls-enable-hostname-verification")
        return args

    def requests_verify(self) -> bool | str:
        """``requests``' ``verify``: the trust bundle, ``False`` if insecure (said once in the
        log, urllib3's per-request warning silenced: :func:`pulsar_state.cluster.admin.tls_verify`),
        else ``True``."""
        return tls_verify(self.tls_trust_cert_path, allow_insecure=self.tls_allow_insecure)
