"""The admin API credentials of a function instance: a token from its secrets.

Functions reach the admin REST API (``userConfig.adminUrl``) to protect their
state topics. On a cluster with authentication that call needs a token: the
function secret ``adminToken`` (``secrets:`` in the function config; Pulsar's
default secrets provider hands the value over as written, a Kubernetes runtime
reads it from a Secret). ``pulsar-state deploy`` fills it in from
``--function-auth-token`` (default: its own ``--auth-token``). A token in the
plain ``userConfig.adminToken`` still works, with a deprecation warning.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ADMIN_TOKEN_SECRET", "function_admin_headers"]

#: the secret (and, deprecated, the user config key) holding the admin token
ADMIN_TOKEN_SECRET = "adminToken"


def function_admin_headers(context: Any) -> dict[str, str] | None:
    """The ``Authorization`` header for the instance's admin calls (``None``: no token)."""
    token = None
    if callable(getattr(context, "get_secret", None)):
        token = context.get_secret(ADMIN_TOKEN_SECRET)
    if not token:
        token = context.get_user_config_value(ADMIN_TOKEN_SECRET)
        if token:
            context.get_logger().warning(
                "deprecated: userConfig.%s holds the admin token in the plain config; "
                "put it in the function's secrets (secrets: {%s: ...})",
                ADMIN_TOKEN_SECRET,
                ADMIN_TOKEN_SECRET,
            )
    return {"Authorization": f"Bearer {token}"} if token else None
