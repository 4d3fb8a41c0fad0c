"""One way for the packaged functions to open their state: :func:`open_function_map`.

Each function here keeps its state in a ``PulsarMap`` on a topic its user config
names (``stateTopic``, ``metadataTopic``, ``assignmentTopic``, ...) or, by
default, on a topic of that name in the function's own tenant and namespace
(:mod:`pulsar_state.topic_names`). The map uses the instance's own Pulsar
client; ``userConfig.adminUrl``, when set, is where the map checks and protects
its topic (infinite retention), and the map ensures retention only then.

An ``https://`` admin URL whose certificate a private CA signs needs that CA:
``userConfig.tlsTrustCertsFilePath``, the PEM file as ``client.conf`` and the
functions worker spell it (:func:`admin_tls`; a path on the host or pod where the
instance runs). ``tlsAllowInsecureConnection: true`` (no certificate checked)
is taken by the SQL sink's position check only, for now; a map refuses it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsar_state.config import StateConfig
from pulsar_state.errors import ConfigurationError
from pulsar_state.pulsar_map import PulsarMap
from pulsar_state.topic_names import namespace_topic

__all__ = [
    "ADMIN_URL",
    "TLS_ALLOW_INSECURE",
    "TLS_TRUST_CERTS",
    "AdminTls",
    "admin_tls",
    "function_topic",
    "map_admin_tls",
    "open_function_map",
]

#: the user-config key of the admin REST URL
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


def function_topic(context: Any, key: str, default_name: str) -> str:
    """The topic user config ``key`` names, else ``default_name`` in the function's namespace."""
    configured = context.get_user_config_value(key)
    if configured:
        return str(configured)
    return namespace_topic(
        context.get_function_tenant(), context.get_function_namespace(), default_name
    )


def map_admin_tls(config_value: Callable[[str], Any]) -> str | None:
    """The trust file a function's ``PulsarMap`` gets (:func:`admin_tls`).

    Raises:
        ConfigurationError: as :func:`admin_tls`, or for ``tlsAllowInsecureConnection:
            true``, which the state core's admin client does not take yet.
    """
    tls = admin_tls(config_value)
    if tls.allow_insecure:
        raise ConfigurationError(
            f"user config {TLS_ALLOW_INSECURE}: true is not supported for the function's "
            f"state (its admin client checks certificates): give {TLS_TRUST_CERTS}, the PEM "
            "file of the CA that signs the admin API's certificate"
        )
    return tls.trust_cert_path


def open_function_map(
    context: Any, key: str, default_name: str, *, admin_headers: dict[str, str] | None = None
) -> PulsarMap[str, Any]:
    """Open the function's map on :func:`function_topic` (call it where the instance runs).

    ``admin_headers``: the admin API's headers (authentication), if it needs any;
    the admin API's TLS trust comes from the user config (:func:`map_admin_tls`).

    Raises:
        ConfigurationError: a TLS setting is wrong (checked before anything connects).
    """
    trust = map_admin_tls(context.get_user_config_value)
    admin_url = context.get_user_config_value(ADMIN_URL)
    return PulsarMap(
        context.get_pulsar_client(),
        function_topic(context, key, default_name),
        admin_url=admin_url,
        admin_headers=admin_headers,
        admin_tls_trust_cert_path=trust,
        config=StateConfig(ensure_retention=admin_url is not None),
    )
