"""One way for the packaged functions to open their state: :func:`open_function_map`.

Each function here keeps its state in a ``PulsarMap`` on a topic its user config
names (``stateTopic``, ``metadataTopic``, ``assignmentTopic``, ...) or, by
default, on a topic of that name in the function's own tenant and namespace
(:mod:`pulsar_state.topic_names`). The map uses the instance's own Pulsar
client; ``userConfig.adminUrl``, when set, is where the map checks and protects
its topic (infinite retention), and the map ensures retention only then.

An ``https://`` admin URL whose certificate a private CA signs needs that CA:
``userConfig.tlsTrustCertsFilePath``, the PEM file as ``client.conf`` and the
functions worker spell it (:mod:`pulsar_state.runtime.tls`; a path on the host
or pod where the instance runs). ``tlsAllowInsecureConnection: true`` checks no
certificate (tests only). The token is the function's ``adminToken`` secret
(:mod:`pulsar_state.runtime.secrets`); all three reach the map as one
:class:`~pulsar_state.cluster.endpoint.AdminEndpoint`
(:func:`~pulsar_state.runtime.tls.function_admin_endpoint`).
"""

from __future__ import annotations

from typing import Any

from pulsar_state.config import StateConfig
from pulsar_state.errors import PermissionDeniedError
from pulsar_state.map.pulsar_map import PulsarMap
from pulsar_state.runtime.secrets import ADMIN_TOKEN_SECRET
from pulsar_state.runtime.tls import ADMIN_URL, function_admin_endpoint
from pulsar_state.topic_names import namespace_topic

__all__ = ["ADMIN_URL", "function_topic", "open_function_map"]


def function_topic(context: Any, key: str, default_name: str) -> str:
    """The topic user config ``key`` names, else ``default_name`` in the function's namespace."""
    configured = context.get_user_config_value(key)
    if configured:
        return str(configured)
    return namespace_topic(
        context.get_function_tenant(), context.get_function_namespace(), default_name
    )


def open_function_map(context: Any, key: str, default_name: str) -> PulsarMap[str, Any]:
    """Open the function's map on :func:`function_topic` (call it where the instance runs).

    Its admin API (URL, ``adminToken`` secret, TLS trust) is
    :func:`~pulsar_state.runtime.tls.function_admin_endpoint`'s.

    Raises:
        ConfigurationError: a TLS setting is wrong (checked before anything connects).
        PermissionDeniedError: the admin API refused the function's role; the
            message names the secret to set, as a function's operator sets it.
    """
    admin = function_admin_endpoint(context)
    try:
        return PulsarMap(
            context.get_pulsar_client(),
            function_topic(context, key, default_name),
            admin=admin,
            config=StateConfig(ensure_retention=admin is not None),
        )
    except PermissionDeniedError as exc:
        token = admin is not None and bool(admin.headers and "Authorization" in admin.headers)
        what = (
            "is set, but its role may not create and protect the topic" if token else "is not set"
        )
        # the refusal itself, without the advice for clients (a function's
        # operator sets a secret, not a command-line option): Pulsar shortens a
        # long exception in `functions status`
        refusal = str(exc).split("; ", 1)[0]
        raise PermissionDeniedError(
            f"{refusal}; this function's admin calls (userConfig.{ADMIN_URL}) authenticate "
            f"with its secret {ADMIN_TOKEN_SECRET!r}, which {what}: give the function "
            f"secrets: {{{ADMIN_TOKEN_SECRET}: <a token of a role with admin rights on the "
            f"namespace>}} (pulsar-state deploy --function-auth-token), or unset "
            f"userConfig.{ADMIN_URL} once an administrator has protected the topic"
        ) from exc
