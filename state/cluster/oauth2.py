"""OAuth 2.0 client credentials for the admin REST calls, as Pulsar's clients do it.

``--auth-plugin oauth2`` (``org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2``)
takes the parameters ``pulsar-admin`` and the Python client take, as JSON, in
either spelling:

- ``issuer_url`` / ``issuerUrl``: the issuer; its token endpoint is found at
  ``{issuer}/.well-known/openid-configuration``;
- ``private_key`` / ``privateKey``: the credentials file,
  ``file:///path/credentials.json`` or ``data:application/json;base64,...``,
  holding ``client_id`` and ``client_secret`` (as issued for a service
  account); or ``client_id`` and ``client_secret`` inline;
- ``audience`` and ``scope``: passed on to the issuer when given.

The broker connection uses the Python client's own
``pulsar.AuthenticationOauth2`` (:meth:`OAuth2Params.client_params` gives it
its spelling). The admin calls use :class:`ClientCredentials`, a
``requests`` authentication: it asks the issuer's token endpoint for an access
token (the ``client_credentials`` grant), keeps it until shortly before it
expires, and sends it as ``Authorization: Bearer``. One token is shared by
every admin client of a process with the same credentials (:func:`credentials_for`).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from pulsar_state.errors import ConfigurationError, PermissionDeniedError

__all__ = ["ClientCredentials", "OAuth2Params", "credentials_for"]

#: a token is fetched again this long before it expires
_EARLY_S = 30.0
_TIMEOUT_S = 10.0


def _pick(raw: dict[str, Any], *names: str) -> str | None:
    for name in names:
        value = raw.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _credentials_file(ref: str) -> dict[str, Any]:
    try:
        if ref.startswith("file://"):
            text = Path(ref[len("file://") :]).read_text(encoding="utf-8")
        elif ref.startswith("data:"):
            header, _, body = ref.partition(",")
            text = base64.b64decode(body).decode() if header.endswith(";base64") else body
        else:
            raise ConfigurationError(
                f"oauth2 private_key must be file:///path or data:...; got {ref[:40]!r}"
            )
        loaded = json.loads(text)
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"cannot read the oauth2 credentials {ref[:60]!r}: {exc}"
        ) from None
    if not isinstance(loaded, dict):
        raise ConfigurationError("the oauth2 credentials file must hold a JSON object")
    return loaded


@dataclass(frozen=True, kw_only=True)
class OAuth2Params:
    """The client-credentials settings, parsed from the plugin's parameters."""

    issuer_url: str
    client_id: str
    client_secret: str = field(repr=False)
    audience: str | None = None
    scope: str | None = None

    @classmethod
    def parse(cls, params: str) -> OAuth2Params:
        """From ``--auth-params`` (JSON, snake_case or camelCase keys).

        Raises:
            ConfigurationError: not JSON, or a setting missing or unreadable.
        """
        try:
            raw = json.loads(params or "")
        except ValueError:
            raise ConfigurationError(
                'oauth2 auth params are JSON: {"issuer_url": ..., "private_key": '
                '"file:///credentials.json", "audience": ...}'
            ) from None
        if not isinstance(raw, dict):
            raise ConfigurationError("oauth2 auth params must be a JSON object")
        creds: dict[str, Any] = {}
        key_ref = _pick(raw, "private_key", "privateKey")
        if key_ref is not None:
            creds = _credentials_file(key_ref)
        issuer = _pick(raw, "issuer_url", "issuerUrl") or _pick(creds, "issuer_url", "issuerUrl")
        client_id = _pick(raw, "client_id", "clientId") or _pick(creds, "client_id", "clientId")
        secret = _pick(raw, "client_secret", "clientSecret") or _pick(
            creds, "client_secret", "clientSecret"
        )
        missing = [
            name
            for name, value in (
                ("issuer_url", issuer),
                ("client_id", client_id),
                ("client_secret", secret),
            )
            if value is None
        ]
        if missing or issuer is None or client_id is None or secret is None:
            raise ConfigurationError(
                f"oauth2 auth params miss {', '.join(missing)} (inline, or client_id and "
                "client_secret in the private_key credentials file)"
            )
        if not issuer.startswith(("http://", "https://")):
            raise ConfigurationError(f"oauth2 issuer_url must be http(s)://..., got {issuer!r}")
        return cls(
            issuer_url=issuer.rstrip("/"),
            client_id=client_id,
            client_secret=secret,
            audience=_pick(raw, "audience"),
            scope=_pick(raw, "scope"),
        )

    def client_params(self) -> str:
        """The parameters in the Python client's spelling (``pulsar.AuthenticationOauth2``)."""
        out = {
            "type": "client_credentials",
            "issuer_url": self.issuer_url,
            "client_id": self.client_id,
            "client_secret": self.client_secret,
        }
        if self.audience:
            out["audience"] = self.audience
        if self.scope:
            out["scope"] = self.scope
        return json.dumps(out)


class ClientCredentials(requests.auth.AuthBase):
    """A bearer token from the issuer, fetched when needed and kept until it expires.

    ``verify``: ``requests``' TLS verification for the issuer.
    """

    def __init__(self, params: OAuth2Params, *, verify: bool | str = True) -> None:
        self.params = params
        self._verify = verify
        self._lock = threading.Lock()
        self._token: str | None = None
        self._until = 0.0
        self.fetched = 0  # tokens fetched so far

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        r.headers["Authorization"] = f"Bearer {self.token()}"
        return r

    def token(self) -> str:
        """The current access token (a new one once it is about to expire).

        Raises:
            PermissionDeniedError: the issuer refused the credentials.
            ConfigurationError: the issuer has no token endpoint, or answers nonsense.
        """
        with self._lock:
            if self._token is None or time.monotonic() >= self._until:
                self._token, lifetime = self._fetch()
                self._until = time.monotonic() + max(0.0, lifetime - _EARLY_S)
                self.fetched += 1
            return self._token

    def _fetch(self) -> tuple[str, float]:
        p = self.params
        try:
            meta = requests.get(
                f"{p.issuer_url}/.well-known/openid-configuration",
                timeout=_TIMEOUT_S,
                verify=self._verify,
            )
            meta.raise_for_status()
            endpoint = meta.json()["token_endpoint"]
            form = {
                "grant_type": "client_credentials",
                "client_id": p.client_id,
                "client_secret": p.client_secret,
            }
            if p.audience:
                form["audience"] = p.audience
            if p.scope:
                form["scope"] = p.scope
            answer = requests.post(endpoint, data=form, timeout=_TIMEOUT_S, verify=self._verify)
        except (requests.RequestException, ValueError, KeyError) as exc:
            raise ConfigurationError(
                f"cannot get an oauth2 token from {p.issuer_url}: {exc}"
            ) from None
        if answer.status_code in (400, 401, 403):
            raise PermissionDeniedError(
                f"the oauth2 issuer {p.issuer_url} refused client {p.client_id!r} "
                f"({answer.status_code}: {answer.text[:200]})"
            )
        try:
            answer.raise_for_status()
            body = answer.json()
            token = body["access_token"]
            lifetime = float(body.get("expires_in", 3600))
        except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
            raise ConfigurationError(
                f"the oauth2 issuer {p.issuer_url} gave no access token: {exc}"
            ) from None
        if not isinstance(token, str) or not token:
            raise ConfigurationError(f"the oauth2 issuer {p.issuer_url} gave an empty token")
        return token, lifetime


_SHARED: dict[tuple[OAuth2Params, str], ClientCredentials] = {}
_SHARED_LOCK = threading.Lock()


def credentials_for(params: OAuth2Params, *, verify: bool | str = True) -> ClientCredentials:
    """The process's one :class:`ClientCredentials` for ``params`` (one token for all)."""
    key = (params, str(verify))
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None:
            found = _SHARED[key] = ClientCredentials(params, verify=verify)
        return found
