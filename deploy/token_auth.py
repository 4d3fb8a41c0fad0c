"""JWT token authentication and authorization for a Pulsar broker.

Pulsar's ``AuthenticationProviderToken`` accepts tokens signed with a shared
secret (HS256); the token's ``sub`` claim is the client's role. A
:class:`TokenAuthority` holds that secret, issues role tokens (with PyJWT, the
same format ``bin/pulsar tokens create`` writes) and renders the broker
settings that turn authentication and authorization on, with one super-user
role that the broker itself and the launcher's readiness checks use.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass, field

import jwt

from pulsar_state.errors import ConfigurationError

__all__ = ["TokenAuthority"]

_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
_CLIENT_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@dataclass(frozen=True, kw_only=True)
class TokenAuthority:
    """A token signing secret and the super-user role of one broker.

    Attributes:
        secret: the HS256 key (32 random bytes by default).
        superuser: the role with every permission (the broker's own client).
    """

    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    superuser: str = "admin"

    def __post_init__(self) -> None:
        if not isinstance(self.secret, bytes) or len(self.secret) < 32:
            raise ConfigurationError("the token secret must be at least 32 bytes")
        if not self.superuser or "," in self.superuser:
            raise ConfigurationError(f"bad super-user role {self.superuser!r}")

    def token(self, role: str) -> str:
        """A token that authenticates as ``role`` (no expiry)."""
        if not role:
            raise ConfigurationError("a role must not be empty")
        return jwt.encode({"sub": role}, self.secret, algorithm="HS256")

    @property
    def superuser_token(self) -> str:
        return self.token(self.superuser)

    def broker_settings(self) -> dict[str, str]:
        """``standalone.conf``/``broker.conf`` settings: authentication + authorization on."""
        secret = base64.b64encode(self.secret).decode()
        return {
            "authenticationEnabled": "true",
            "authenticationProviders": _PROVIDER,
            "authorizationEnabled": "true",
            "superUserRoles": self.superuser,
            "tokenSecretKey": f"data:;base64,{secret}",
            "brokerClientAuthenticationPlugin": _CLIENT_PLUGIN,
            "brokerClientAuthenticationParameters": f"token:{self.superuser_token}",
        }
