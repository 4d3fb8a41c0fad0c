"""A function's (and the SQL sink's) admin TLS settings from its user config: pure logic.

``tlsTrustCertsFilePath`` and ``tlsAllowInsecureConnection`` are spelled as in
``client.conf``; a wrong value is a ConfigurationError naming the key, raised
when the function opens its state, before anything connects. The real TLS
admin API is in ``tests/faults/test_tls.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pulsar_state import AdminEndpoint, ConfigurationError
from pulsar_state.runtime.tls import AdminTls, admin_tls, config_admin_endpoint


def test_nothing_set_trusts_the_system_cas() -> None:
    assert admin_tls(dict[str, Any]().get) == AdminTls(trust_cert_path=None, allow_insecure=False)
    assert admin_tls({"tlsTrustCertsFilePath": ""}.get).trust_cert_path is None


def test_a_trust_file_is_taken_and_a_missing_one_is_refused(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    assert admin_tls({"tlsTrustCertsFilePath": str(ca)}.get).trust_cert_path == str(ca)
    config = {"adminUrl": "https://pulsar:8443", "tlsTrustCertsFilePath": str(ca)}
    assert config_admin_endpoint(config.get) == AdminEndpoint(
        url="https://pulsar:8443", tls_trust_cert_path=str(ca)
    )
    for bad in (str(tmp_path / "nope.pem"), str(tmp_path), 42):
        with pytest.raises(ConfigurationError, match="tlsTrustCertsFilePath"):
            admin_tls({"tlsTrustCertsFilePath": bad}.get)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), ("true", True), (" False ", False), (None, False)],
)
def test_allow_insecure_takes_booleans_as_json_yaml_or_text(value: Any, expected: bool) -> None:
    assert admin_tls({"tlsAllowInsecureConnection": value}.get).allow_insecure is expected


@pytest.mark.parametrize("value", ["yes", "1", 1, 0, [], {}])
def test_allow_insecure_refuses_anything_else(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="tlsAllowInsecureConnection must be true or"):
        admin_tls({"tlsAllowInsecureConnection": value}.get)


def test_a_functions_map_gets_the_insecure_flag_and_its_token() -> None:
    config = {"adminUrl": "https://pulsar:8443", "tlsAllowInsecureConnection": True}
    headers = {"Authorization": "Bearer jwt"}
    assert config_admin_endpoint(config.get, headers=headers) == AdminEndpoint(
        url="https://pulsar:8443", tls_allow_insecure=True, headers=headers
    )
    # no admin URL: no endpoint, but the TLS settings are still checked
    assert config_admin_endpoint({"tlsAllowInsecureConnection": True}.get) is None
    with pytest.raises(ConfigurationError, match="tlsAllowInsecureConnection"):
        config_admin_endpoint({"tlsAllowInsecureConnection": "yes"}.get)
