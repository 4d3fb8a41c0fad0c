"""The Spark source's auth and TLS options: parsed into one ClusterAuth, checked at
parsing with errors that name the option, and never shown in a repr."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from pulsar_state.connectors.spark_options import SourceOptions

BASE = {
    "serviceUrl": "pulsar+ssl://127.0.0.1:6651",
    "adminUrl": "https://127.0.0.1:8443",
    "topic": "m",
}


@pytest.fixture
def pem(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return path


def test_no_auth_options_mean_no_authentication_and_the_system_trust() -> None:
    opts = SourceOptions.parse(BASE)
    assert opts.auth.kind is None
    assert opts.auth.client_kwargs() == {"authentication": None}
    assert opts.admin_endpoint().verify() is True


def test_the_trust_options_reach_the_client_and_the_admin_calls(pem: Path) -> None:
    opts = SourceOptions.parse(
        {**BASE, "tlsTrustCertsFilePath": str(pem), "tlsEnableHostnameVerification": "true"}
    )
    kwargs = opts.auth.client_kwargs()
    assert kwargs["tls_trust_certs_file_path"] == str(pem)
    assert kwargs["tls_validate_hostname"] is True
    assert opts.admin_endpoint().verify() == str(pem)


def test_option_names_are_case_insensitive_like_the_others(pem: Path) -> None:
    opts = SourceOptions.parse({**BASE, "TLSTRUSTCERTSFILEPATH": str(pem)})
    assert opts.auth.tls_trust_cert_path == str(pem)


def test_a_missing_trust_file_is_an_error_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"tlsTrustCertsFilePath .* is not a file"):
        SourceOptions.parse({**BASE, "tlsTrustCertsFilePath": str(tmp_path / "nope.pem")})


def test_allow_insecure_is_true_or_false() -> None:
    with pytest.raises(ValueError, match="tlsAllowInsecureConnection is true or false"):
        SourceOptions.parse({**BASE, "tlsAllowInsecureConnection": "yes"})
    opts = SourceOptions.parse({**BASE, "tlsAllowInsecureConnection": "true"})
    assert opts.auth.client_kwargs()["tls_allow_insecure_connection"] is True
    assert opts.admin_endpoint().verify() is False


def test_auth_token_still_works_and_is_not_in_the_repr() -> None:
    secret = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXJvbGU.sig"
    opts = SourceOptions.parse({**BASE, "authToken": secret})
    assert opts.auth.kind == "token"
    assert opts.admin_endpoint().headers == {"Authorization": f"Bearer {secret}"}
    assert secret not in repr(opts)


def test_an_auth_plugin_by_class_name_with_params(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("the-jwt\n")
    opts = SourceOptions.parse(
        {
            **BASE,
            "authPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "authParams": f"file://{token_file}",
        }
    )
    assert opts.admin_endpoint().headers == {"Authorization": "Bearer the-jwt"}
    assert "the-jwt" not in repr(opts)


def test_basic_params_are_not_in_the_repr() -> None:
    params = '{"userId": "spark", "password": "hunter2-secret"}'
    opts = SourceOptions.parse({**BASE, "authPlugin": "basic", "authParams": params})
    assert opts.auth.kind == "basic"
    assert "hunter2-secret" not in repr(opts)


def test_tls_client_certificate_files_are_checked_at_parsing(tmp_path: Path, pem: Path) -> None:
    missing = tmp_path / "client.key"
    with pytest.raises(ValueError, match=r"authPlugin / authParams: .*not a file"):
        SourceOptions.parse(
            {
                **BASE,
                "authPlugin": "tls",
                "authParams": f"tlsCertFile:{pem},tlsKeyFile:{missing}",
            }
        )
    with pytest.raises(ValueError, match=r"authPlugin / authParams: tls auth params need"):
        SourceOptions.parse({**BASE, "authPlugin": "tls", "authParams": f"tlsCertFile:{pem}"})


def test_a_plugin_without_params_or_unknown_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="needs auth params"):
        SourceOptions.parse({**BASE, "authPlugin": "tls"})
    with pytest.raises(ValueError, match="unsupported auth plugin"):
        SourceOptions.parse({**BASE, "authPlugin": "kerberos", "authParams": "x:y"})
    with pytest.raises(ValueError, match="either an auth token or an auth plugin"):
        SourceOptions.parse(
            {**BASE, "authToken": "t", "authPlugin": "basic", "authParams": "userId:a,password:b"}
        )


def test_oauth2_params_are_checked_at_parsing() -> None:
    with pytest.raises(ValueError, match="oauth2 auth params miss client_id"):
        SourceOptions.parse(
            {**BASE, "authPlugin": "oauth2", "authParams": '{"issuer_url": "https://x"}'}
        )
    opts = SourceOptions.parse(
        {
            **BASE,
            "authPlugin": "oauth2",
            "authParams": '{"issuerUrl": "https://x", "clientId": "c", "clientSecret": "s"}',
        }
    )
    endpoint = pickle.loads(pickle.dumps(opts)).admin_endpoint()
    assert endpoint.oauth2 is not None and endpoint.oauth2.client_id == "c"


def test_parsed_options_pickle_with_their_auth(pem: Path) -> None:
    opts = SourceOptions.parse({**BASE, "tlsTrustCertsFilePath": str(pem), "authToken": "t"})
    again = pickle.loads(pickle.dumps(opts))
    assert again == opts
    assert again.auth.client_kwargs()["tls_trust_certs_file_path"] == str(pem)
