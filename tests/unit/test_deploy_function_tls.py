"""``pulsar-state deploy --function-tls-trust-cert-path``: the CA file the deployed
functions' own admin calls trust, sent as ``userConfig.tlsTrustCertsFilePath``
(a path on the workers, so not checked where deploy runs)."""

from __future__ import annotations

from click.testing import CliRunner

from pulsar_state.cli import main
from pulsar_state.deploy.functions_deploy import FUNCTIONS, _load, render_config

ADMIN = "https://pulsar.example:8443"


def test_the_trust_file_is_filled_in_where_a_config_leaves_it_out() -> None:
    for config_file in sorted(FUNCTIONS):
        sent, filled = render_config(
            _load(config_file), admin_url=ADMIN, admin_tls_trust_cert_path="/etc/pulsar/ca.pem"
        )
        assert sent["userConfig"]["tlsTrustCertsFilePath"] == "/etc/pulsar/ca.pem"
        assert "userConfig.tlsTrustCertsFilePath=/etc/pulsar/ca.pem" in filled
    own = {"name": "f", "userConfig": {"tlsTrustCertsFilePath": "/theirs.pem"}}
    sent, filled = render_config(own, admin_url=ADMIN, admin_tls_trust_cert_path="/ours.pem")
    assert sent["userConfig"]["tlsTrustCertsFilePath"] == "/theirs.pem"
    assert not any("tlsTrustCertsFilePath" in f for f in filled)
    sent, filled = render_config({"name": "f"}, admin_url=ADMIN)
    assert "tlsTrustCertsFilePath" not in sent["userConfig"]


def test_deploy_takes_the_option_and_its_env() -> None:
    shown = CliRunner().invoke(main, ["deploy", "--help"])
    assert shown.exit_code == 0, shown.output
    assert "--function-tls-trust-cert-path" in shown.output
    assert "PULSAR_STATE_FUNCTION_TLS_TRUST_CERT_PATH" in shown.output
