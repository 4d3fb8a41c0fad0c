"""The local cluster's TLS, pure side: TLS ports, broker settings, the layout, the CA's files.

Nothing here starts a process; the certificates are made for real (with
``cryptography``) and checked as certificates. The cluster suite
(``tests/cluster/test_tls_through_any_broker.py``) proves a real TLS cluster.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from pulsar_state.cli import main
from pulsar_state.deploy.cluster import ClusterInfo, LocalCluster
from pulsar_state.deploy.cluster_config import (
    TLS_PROVIDER,
    BookiePorts,
    BrokerPorts,
    ClusterConfig,
    ClusterPorts,
    broker_settings,
    functions_worker_config,
    stored_layout,
)
from pulsar_state.deploy.cluster_launch import ClusterFiles
from pulsar_state.deploy.cluster_tls import ClusterTls
from pulsar_state.deploy.distribution import PulsarDistribution
from pulsar_state.deploy.errors import BrokerNotRunningError, BrokerSetupError
from pulsar_state.deploy.token_auth import TokenAuthority
from pulsar_state.errors import ConfigurationError

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
TLS_DIR = Path("/data/cluster/tls")


def _tls_ports(brokers: int = 2) -> ClusterPorts:
    return ClusterPorts(
        zookeeper=20000,
        zookeeper_metrics=20001,
        bookies=(BookiePorts(bookie=20100, stats=20101),),
        brokers=tuple(
            BrokerPorts(
                service=20200 + 4 * i,
                web=20201 + 4 * i,
                service_tls=20202 + 4 * i,
                web_tls=20203 + 4 * i,
            )
            for i in range(brokers)
        ),
    )


# -- ports -------------------------------------------------------------------------------


def test_tls_ports_are_picked_distinct_beside_the_plain_ones_and_survive_json() -> None:
    ports = ClusterPorts.pick(brokers=3, bookies=1, tls=True)
    named = ports.named()
    assert len(named) == 2 + 2 * 1 + 4 * 3
    assert len({port for _, port in named}) == len(named)
    assert ClusterPorts.from_json(ports.to_json()) == ports
    assert ports.tls
    broker = ports.brokers[2]
    assert broker.service_url.startswith("pulsar://127.0.0.1:")  # the plain ones stay
    assert broker.tls_service_url == f"pulsar+ssl://127.0.0.1:{broker.service_tls}"
    assert broker.tls_admin_url == f"https://127.0.0.1:{broker.web_tls}"
    assert ("broker-2 web TLS", broker.web_tls) in named
    plain = ClusterPorts.pick(brokers=2, bookies=1)
    assert not plain.tls
    assert plain.brokers[0].tls_service_url is None
    assert len(plain.named()) == 2 + 2 + 2 * 2


def test_ports_written_before_tls_are_still_read() -> None:
    before = {
        "zookeeper": 1000,
        "zookeeper_metrics": 1001,
        "bookies": [{"bookie": 1002, "stats": 1003}],
        "brokers": [{"service": 1004, "web": 1005}, {"service": 1006, "web": 1007}],
    }
    ports = ClusterPorts.from_json(json.dumps(before))
    assert not ports.tls
    assert ports.brokers[1].admin_url == "http://127.0.0.1:1007"
    assert ports.brokers[1].tls_admin_url is None


def test_tls_ports_are_validated() -> None:
    bookies = (BookiePorts(bookie=1002, stats=1003),)
    with pytest.raises(ConfigurationError, match="both TLS ports"):
        ClusterPorts(
            zookeeper=1000,
            zookeeper_metrics=1001,
            bookies=bookies,
            brokers=(BrokerPorts(service=1004, web=1005, service_tls=1006),),
        )
    with pytest.raises(ConfigurationError, match="every broker"):
        ClusterPorts(
            zookeeper=1000,
            zookeeper_metrics=1001,
            bookies=bookies,
            brokers=(
                BrokerPorts(service=1004, web=1005, service_tls=1006, web_tls=1007),
                BrokerPorts(service=1008, web=1009),
            ),
        )
    with pytest.raises(ConfigurationError, match="differ"):
        ClusterPorts(
            zookeeper=1000,
            zookeeper_metrics=1001,
            bookies=bookies,
            brokers=(BrokerPorts(service=1004, web=1005, service_tls=1006, web_tls=1004),),
        )


# -- settings ----------------------------------------------------------------------------


def test_a_tls_broker_serves_tls_beside_its_plain_ports_with_the_cluster_s_files() -> None:
    config = ClusterConfig(tls=True)
    ports = _tls_ports()
    tls = ClusterTls(TLS_DIR)
    settings = broker_settings(config, ports, 1, tls=tls)
    own = ports.brokers[1]
    assert settings["brokerServicePort"] == str(own.service)
    assert settings["webServicePort"] == str(own.web)
    assert settings["brokerServicePortTls"] == str(own.service_tls)
    assert settings["webServicePortTls"] == str(own.web_tls)
    assert settings["tlsCertificateFilePath"] == str(TLS_DIR / "broker.pem")
    assert settings["tlsKeyFilePath"] == str(TLS_DIR / "broker.key")
    assert settings["tlsTrustCertsFilePath"] == str(TLS_DIR / "ca.pem")
    assert "authenticationEnabled" not in settings  # TLS alone authenticates nobody


def test_token_auth_with_tls_takes_client_certificates_too() -> None:
    authority = TokenAuthority()
    config = ClusterConfig(auth="token", tls=True)
    settings = broker_settings(config, _tls_ports(), 0, authority, ClusterTls(TLS_DIR))
    assert settings["authenticationProviders"] == f"{TLS_PROVIDER},{TOKEN_PROVIDER}"
    assert settings["authenticationEnabled"] == "true"
    # the brokers' own client stays on the plain ports with the super-user's token
    assert settings["brokerClientAuthenticationPlugin"].endswith("AuthenticationToken")
    assert "brokerClientTlsEnabled" not in settings
    plain = broker_settings(ClusterConfig(auth="token"), _tls_ports(), 0, authority)
    assert plain["authenticationProviders"] == TOKEN_PROVIDER
    assert "brokerServicePortTls" not in plain


def test_the_caller_s_broker_settings_still_win_over_tls() -> None:
    config = ClusterConfig(
        tls=True, broker_settings={"tlsRequireTrustedClientCertOnConnect": "true"}
    )
    settings = broker_settings(config, _tls_ports(), 0, tls=ClusterTls(TLS_DIR))
    assert settings["tlsRequireTrustedClientCertOnConnect"] == "true"


def test_a_tls_broker_without_its_ports_or_files_is_refused() -> None:
    config = ClusterConfig(tls=True)
    plain_ports = ClusterPorts.pick(brokers=1, bookies=1)
    with pytest.raises(ConfigurationError, match="TLS ports"):
        broker_settings(config, plain_ports, 0, tls=ClusterTls(TLS_DIR))
    with pytest.raises(ConfigurationError, match="certificates"):
        broker_settings(config, _tls_ports(), 0)


def test_the_functions_worker_takes_client_certificates_under_tls() -> None:
    config = ClusterConfig(functions=True, auth="token", tls=True)
    worker = functions_worker_config(
        {},
        config,
        _tls_ports(),
        0,
        data_dir=Path("/data/cluster"),
        python_instance=Path("/dist/python_instance_main.py"),
        distribution_root=Path("/dist"),
        authority=TokenAuthority(),
    )
    assert worker["authenticationProviders"] == [TLS_PROVIDER, TOKEN_PROVIDER]


def test_rendered_broker_files_of_a_tls_cluster(tmp_path: Path) -> None:
    dist = PulsarDistribution(version="9.9.9", cache_dir=tmp_path / "cache")
    conf = dist.root / "conf"
    conf.mkdir(parents=True)
    for name in ("zookeeper.conf", "bookkeeper.conf"):
        (conf / name).write_text("x=1\n")
    (conf / "broker.conf").write_text("brokerServicePortTls=\nwebServicePortTls=\n")
    (conf / "functions_worker.yml").write_text("workerPort: 6750\n")
    config = ClusterConfig(auth="token", tls=True)
    files = ClusterFiles(data_dir=tmp_path / "c", distribution=dist, config=config, python="py")
    tls = ClusterTls(tmp_path / "c" / "tls")
    files.render(_tls_ports(), TokenAuthority(), tls)
    broker = files.conf("broker-1").read_text()
    assert broker.count("brokerServicePortTls=20206") == 1
    assert broker.count("webServicePortTls=20207") == 1
    assert f"tlsKeyFilePath={tls.key_file}" in broker


# -- the layout ------------------------------------------------------------------------------


def test_tls_is_part_of_the_layout_and_a_layout_from_before_tls_means_none() -> None:
    assert ClusterConfig(tls=True).layout()["tls"] is True
    before = {"brokers": 2, "bookies": 1, "auth": "token", "cluster_name": "local"}
    assert stored_layout(before) == ClusterConfig(auth="token").layout()
    assert stored_layout(before) != ClusterConfig(auth="token", tls=True).layout()
    assert stored_layout(None) is None
    with pytest.raises(TypeError, match="tls"):
        ClusterConfig(tls="yes")  # type: ignore[arg-type]


def _data_dir_from_before_tls(data_dir: Path) -> dict[str, object]:
    ports = {
        "zookeeper": 21000,
        "zookeeper_metrics": 21001,
        "bookies": [{"bookie": 21002, "stats": 21003}],
        "brokers": [{"service": 21004, "web": 21005}, {"service": 21006, "web": 21007}],
    }
    layout = {"brokers": 2, "bookies": 1, "auth": "token", "cluster_name": "local"}
    (data_dir / "layout.json").write_text(json.dumps({"layout": layout, "ports": ports}))
    (data_dir / "data").mkdir()
    return ports


def test_a_data_dir_made_before_tls_keeps_its_ports_and_needs_fresh_for_tls(
    tmp_path: Path,
) -> None:
    _data_dir_from_before_tls(tmp_path)
    kept = LocalCluster(data_dir=tmp_path, auth="token")._ports()
    assert kept.brokers[1].web == 21007
    assert not kept.tls
    with pytest.raises(ConfigurationError, match="fresh"):
        LocalCluster(data_dir=tmp_path, auth="token", tls=True)._ports()


def test_a_tls_data_dir_keeps_its_tls_ports(tmp_path: Path) -> None:
    first = LocalCluster(data_dir=tmp_path, tls=True)._ports()
    assert first.tls
    (tmp_path / "data").mkdir()
    assert LocalCluster(data_dir=tmp_path, tls=True)._ports() == first
    assert json.loads((tmp_path / "layout.json").read_text())["layout"]["tls"] is True
    with pytest.raises(ConfigurationError, match="fresh"):
        LocalCluster(data_dir=tmp_path, tls=False)._ports()


# -- the CA and its certificates -------------------------------------------------------------


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_the_ca_and_the_brokers_certificate_are_made_once(tmp_path: Path) -> None:
    tls = ClusterTls(tmp_path / "tls").ensure()
    assert tls.exists()
    ca, broker = _cert(tls.ca_file), _cert(tls.cert_file)
    broker.verify_directly_issued_by(ca)
    sans = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert tls.key_file.read_text().startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8
    serialization.load_pem_private_key(tls.key_file.read_bytes(), password=None)
    for key in (tls.key_file, tls.ca_key_file):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    made = {p.name: p.read_bytes() for p in tls.directory.iterdir()}
    tls.ensure()
    assert {p.name: p.read_bytes() for p in tls.directory.iterdir()} == made


def test_a_client_certificate_names_its_role_and_is_kept(tmp_path: Path) -> None:
    tls = ClusterTls(tmp_path / "tls")
    with pytest.raises(BrokerSetupError, match="no cluster CA"):
        tls.client_certificate("reader")
    tls.ensure()
    cert_file, key_file = tls.client_certificate("reader")
    cert = _cert(cert_file)
    cert.verify_directly_issued_by(_cert(tls.ca_file))
    common_names = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    assert [a.value for a in common_names] == ["reader"]
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert tls.client_certificate("reader") == (cert_file, key_file)
    assert _cert(cert_file) == cert  # not made again
    with pytest.raises(ConfigurationError):
        tls.client_certificate("../escape")


def test_a_new_ca_drops_the_client_certificates_of_the_old_one(tmp_path: Path) -> None:
    tls = ClusterTls(tmp_path / "tls").ensure()
    cert_file, _ = tls.client_certificate("reader")
    tls.ca_key_file.unlink()  # an incomplete CA: made again
    tls.ensure()
    assert not cert_file.exists()
    fresh, _ = tls.client_certificate("reader")
    _cert(fresh).verify_directly_issued_by(_cert(tls.ca_file))


def test_without_cryptography_the_error_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "pulsar_state.deploy.cluster_certs", raising=False)
    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(BrokerSetupError, match=r"pulsar-shared-state\[test\]"):
        ClusterTls(tmp_path / "tls").ensure()


# -- what the cluster tells ------------------------------------------------------------------


def test_cluster_info_names_the_tls_urls_and_the_ca(tmp_path: Path) -> None:
    info = ClusterInfo(
        cluster_name="local",
        service_urls=("pulsar://127.0.0.1:1", "pulsar://127.0.0.1:2"),
        admin_urls=("http://127.0.0.1:3", "http://127.0.0.1:4"),
        superuser_token="t",
        token_file=str(tmp_path / "admin.token"),
        data_dir=str(tmp_path),
        version="4.0.8",
        functions=False,
        started_at=0.0,
        tls_service_urls=("pulsar+ssl://127.0.0.1:5", "pulsar+ssl://127.0.0.1:6"),
        tls_admin_urls=("https://127.0.0.1:7", "https://127.0.0.1:8"),
        ca_file=str(tmp_path / "tls" / "ca.pem"),
    )
    assert info.tls_service_url == "pulsar+ssl://127.0.0.1:5,127.0.0.1:6"
    lines = info.describe().splitlines()
    for line in (
        "broker.1.tls_service_url=pulsar+ssl://127.0.0.1:6",
        "broker.1.tls_admin_url=https://127.0.0.1:8",
        "tls_service_url=pulsar+ssl://127.0.0.1:5,127.0.0.1:6",
        "tls_admin_url=https://127.0.0.1:7",
        f"ca_file={tmp_path / 'tls' / 'ca.pem'}",
        "admin_url=http://127.0.0.1:3",
    ):
        assert line in lines
    assert ClusterInfo.from_dict(json.loads(json.dumps(info.__dict__))) == info


def test_cluster_info_written_before_tls_is_read_without_tls() -> None:
    before = {
        "cluster_name": "local",
        "service_urls": ["pulsar://127.0.0.1:1"],
        "admin_urls": ["http://127.0.0.1:3"],
        "superuser_token": None,
        "token_file": None,
        "data_dir": "/d",
        "version": "4.0.8",
        "functions": False,
        "started_at": 0.0,
    }
    info = ClusterInfo.from_dict(before)
    assert (info.tls_service_urls, info.tls_service_url, info.ca_file) == ((), None, None)
    assert "tls" not in info.describe() and "ca_file" not in info.describe()


def test_a_client_certificate_needs_a_tls_cluster(tmp_path: Path) -> None:
    cluster = LocalCluster(data_dir=tmp_path)
    with pytest.raises(BrokerNotRunningError, match="--tls"):
        cluster.client_certificate("reader")
    with pytest.raises(ConfigurationError):
        cluster.client_certificate("a b")
    refused = CliRunner().invoke(
        main, ["cluster", "client-cert", "reader", "--data-dir", str(tmp_path)]
    )
    assert refused.exit_code == 1, refused.output
    assert "--tls" in refused.output
    bad = CliRunner().invoke(main, ["cluster", "client-cert", "a/b", "--data-dir", str(tmp_path)])
    assert bad.exit_code == 2, bad.output


def test_cli_client_cert_prints_its_files(tmp_path: Path) -> None:
    LocalCluster(data_dir=tmp_path).tls_files.ensure()  # as a start with --tls leaves it
    done = CliRunner().invoke(
        main, ["cluster", "client-cert", "reader", "--data-dir", str(tmp_path)]
    )
    assert done.exit_code == 0, done.output
    cert, key = tmp_path / "tls" / "client-reader.pem", tmp_path / "tls" / "client-reader.key"
    assert done.output.splitlines() == [
        f"cert_file={cert}",
        f"key_file={key}",
        f"ca_file={tmp_path / 'tls' / 'ca.pem'}",
        f"auth_params=tlsCertFile:{cert},tlsKeyFile:{key}",
    ]
    assert cert.is_file()


def test_cli_start_offers_tls() -> None:
    shown = CliRunner().invoke(main, ["cluster", "start", "--help"])
    assert shown.exit_code == 0
    assert "--tls" in shown.output
