"""The admin API's TLS trust of a function instance (or a SQL sink): from its user config.

A function reaches the admin REST API at ``userConfig.adminUrl`` (to protect its
state topics; the SQL sink also to check stored positions). An ``https://``
admin URL whose certificate a private CA signs needs that CA's PEM file:
``userConfig.tlsTrustCertsFilePath``, spelled as ``client.conf`` and the
functions worker spell it (a path on the host or pod where the instance runs).
``tlsAllowInsecureConnection: true`` turns the certificate check off (tests
only). Both are read and validated by :func:`admin_tls` when the function opens
its state, before anything connects; the credentials are the secret
``adminToken`` (:mod:`pulsar_state.runtime.secrets`). :func:`function_admin_endpoint`
puts the URL, the token and the trust into the one
:class:`~pulsar_state.cluster.endpoint.AdminEndpoint` the core takes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.errors import ConfigurationError
from pulsar_state.runtime.secrets import function_admin_headers

__all__ = [
    "ADMIN_URL",
    "TLS_ALLOW_INSECURE",
    "TLS_TRUST_CERTS",
    "AdminTls",
    "admin_tls",
    "config_admin_endpoint",
    "function_admin_endpoint",
]

#: the user-config key of the admin API's URL
ADMIN_URL = "adminUrl"

#: the user-config key of the CA bundle that signs the admin API's certificate
TLS_TRUST_CERTS = "tlsTrustCertsFilePath"
#: the user-config key that turns the admin API's certificate check off
TLS_ALLOW_INSECURE = "tlsAllowInsecureConnection"


@dataclass(frozen=True)
class AdminTls:
    """The admin API's TLS trust of a function or sink config, validated."""

    trust_cert_path: str | None = None
    allow_insecure: bool = False


def admin_tls(config_value: Callable[[str], Any]) -> AdminTls:
    """The :data:`TLS_TRUST_CERTS` and :data:`TLS_ALLOW_INSECURE` settings read through
    ``config_value`` (``context.get_user_config_value``, or a config dict's ``get``).

    Raises:
        ConfigurationError: the trust file is not a file, or the insecure flag is
            not a boolean (``true``/``false``, as JSON, YAML or a string).
    """
    trust = config_value(TLS_TRUST_CERTS)
    if trust in (None, ""):
        trust = None
    elif not isinstance(trust, str) or not Path(trust).is_file():
        raise ConfigurationError(
            f"user config {TLS_TRUST_CERTS} {trust!r} is not a file: it names the PEM file of "
            "the CA that signs the admin API's certificate, on the host where the instance runs"
        )
    insecure = config_value(TLS_ALLOW_INSECURE)
    if isinstance(insecure, str) and insecure.strip().lower() in ("true", "false"):
        insecure = insecure.strip().lower() == "true"
    if insecure is None:
        insecure = False
    if not isinstance(insecure, bool):
        raise ConfigurationError(
            f"user config {TLS_ALLOW_INSECURE} must be true or false, got {insecure!r}"
        )
    return AdminTls(trust_cert_path=trust, allow_insecure=insecure)


def config_admin_endpoint(
    config_value: Callable[[str], Any], *, headers: dict[str, str] | None = None
) -> AdminEndpoint | None:
    """The admin API of a function's or sink's config: :data:`ADMIN_URL` with the
    config's TLS trust (:func:`admin_tls`) and ``headers`` (the credentials);
    ``None`` without an admin URL.

    Raises:
        ConfigurationError: as :func:`admin_tls`, or a URL that is not http(s)://.
    """
    tls = admin_tls(config_value)
    url = config_value(ADMIN_URL)
    if url in (None, ""):
        return None
    if not isinstance(url, str):
        raise ConfigurationError(f"user config {ADMIN_URL} must be a URL, got {url!r}")
    return AdminEndpoint(
        url=url,
        headers=headers,
        tls_trust_cert_path=tls.trust_cert_path,
        tls_allow_insecure=tls.allow_insecure,
    )


def function_admin_endpoint(context: Any) -> AdminEndpoint | None:
    """The admin API of a function instance: its user config's :data:`ADMIN_URL` and
    TLS settings, its ``adminToken`` secret (:func:`function_admin_headers`).

    Raises:
        ConfigurationError: as :func:`config_admin_endpoint`.
    """
    return config_admin_endpoint(
        context.get_user_config_value, headers=function_admin_headers(context)
    )
