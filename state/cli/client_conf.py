"""``client.conf``, read as ``pulsar-admin`` and ``pulsar-client`` read it.

Users of Pulsar's own tools keep their connection settings in a
``client.conf`` (Java properties) and name it with ``PULSAR_CLIENT_CONF``. The
``pulsar-state`` commands read the same file for the defaults of their
connection options; a flag or its environment variable wins over the file,
and the file over the built-in default:

==================================  =========================================
``client.conf``                     option
==================================  =========================================
``webServiceUrl`` (else ``webServiceUrlTls``)        ``--admin-url``
``brokerServiceUrl`` (else ``brokerServiceUrlTls``)  ``--service-url``
``authPlugin``                      ``--auth-plugin`` (a class name as Pulsar's)
``authParams``                      ``--auth-params``
``tlsTrustCertsFilePath``           ``--tls-trust-cert-path``
``tlsAllowInsecureConnection``      ``--tls-allow-insecure``
``tlsEnableHostnameVerification``   ``--tls-enable-hostname-verification``
==================================  =========================================

With ``useTls=true`` the ``...Tls`` URLs come first, as in ``pulsar-admin``.
An authentication given on the command line or in the environment
(``--auth-token``, ``--auth-plugin``) replaces the file's whole (its
``authParams`` are not mixed with another plugin). A ``PULSAR_CLIENT_CONF``
that names no readable file is a usage error.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import click
import javaproperties

__all__ = ["CLIENT_CONF_ENV", "conf_default", "conf_flag", "read_client_conf"]

CLIENT_CONF_ENV = "PULSAR_CLIENT_CONF"

#: option name -> the client.conf keys that give its default, first found wins
_KEYS: dict[str, tuple[str, ...]] = {
    "admin_url": ("webServiceUrl", "webServiceUrlTls"),
    "service_url": ("brokerServiceUrl", "brokerServiceUrlTls"),
    "auth_plugin": ("authPlugin",),
    "auth_params": ("authParams",),
    "tls_trust_cert_path": ("tlsTrustCertsFilePath",),
    "tls_allow_insecure": ("tlsAllowInsecureConnection",),
    "tls_enable_hostname_verification": ("tlsEnableHostnameVerification",),
}


@functools.cache
def _load(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            return dict(javaproperties.load(f))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise click.UsageError(
            f"{CLIENT_CONF_ENV}={path}: cannot read it as a client.conf ({exc})"
        ) from None


def read_client_conf() -> dict[str, str]:
    """The settings of the ``client.conf`` named by ``PULSAR_CLIENT_CONF``, by option
    name (``admin_url``, ``auth_plugin``, ...); empty without the variable.

    Raises:
        click.UsageError: the variable names no readable properties file.
    """
    path = os.environ.get(CLIENT_CONF_ENV)
    if not path:
        return {}
    props = _load(str(Path(path).expanduser()))
    tls_first = props.get("useTls", "").strip().lower() == "true"
    out: dict[str, str] = {}
    for option, keys in _KEYS.items():
        ordered = tuple(reversed(keys)) if tls_first and len(keys) > 1 else keys
        for key in ordered:
            value = props.get(key, "").strip()
            if value:
                out[option] = value
                break
    return out


def conf_default(option: str, fallback: str | None) -> Callable[[], str | None]:
    """An option's default: ``client.conf``'s setting, else ``fallback`` (read at the call)."""
    return lambda: read_client_conf().get(option, fallback)


def conf_flag(option: str) -> Callable[[], bool]:
    """A flag's default: ``client.conf``'s ``true``/``false`` setting, else off."""
    return lambda: read_client_conf().get(option, "false").lower() == "true"
