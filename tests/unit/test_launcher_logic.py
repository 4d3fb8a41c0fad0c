"""Pure logic of the launcher: config rendering, ports, versions, verification."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import yaml

from pulsar_state.deploy import distribution as dist_mod
from pulsar_state.deploy.distribution import PulsarDistribution, _java_major, default_cache_dir
from pulsar_state.deploy.errors import BrokerSetupError
from pulsar_state.deploy.standalone_config import (
    StandalonePorts,
    render_functions_worker_yml,
    render_standalone_conf,
)
from pulsar_state.errors import ConfigurationError, PulsarStateError


def _fake_distribution(tmp_path: Path, version: str = "9.9.9") -> PulsarDistribution:
    dist = PulsarDistribution(version=version, cache_dir=tmp_path)
    conf = dist.root / "conf"
    conf.mkdir(parents=True)
    (conf / "standalone.conf").write_text(
        "# comment brokerServicePort=1\nbrokerServicePort=6650\nwebServicePort=8080\n"
        "bindAddress=0.0.0.0\nclusterName=standalone\n"
    )
    (conf / "functions_worker.yml").write_text(
        "workerId: standalone\nworkerPort: 6750\nfunctionRuntimeFactoryConfigs:\n"
        "  logDirectory: logs/\n  pythonInstanceLocation:\n"
    )
    return dist


def test_standalone_conf_overrides_only_what_it_must(tmp_path: Path) -> None:
    dist = _fake_distribution(tmp_path)
    ports = StandalonePorts(broker=10001, web=10002, worker=10003)
    text = render_standalone_conf(dist, ports)
    settings = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#"
    )
    assert settings["brokerServicePort"] == "10001"
    assert settings["webServicePort"] == "10002"
    assert settings["bindAddress"] == "127.0.0.1"
    assert settings["advertisedAddress"] == "127.0.0.1"
    assert settings["clusterName"] == "standalone"  # untouched
    assert "# comment brokerServicePort=1" in text  # comments kept as they are
    assert text.count("brokerServicePort=10001") == 1


def test_worker_yml_points_python_runtime_at_the_distribution(tmp_path: Path) -> None:
    dist = _fake_distribution(tmp_path)
    ports = StandalonePorts(broker=10001, web=10002, worker=10003)
    config = yaml.safe_load(render_functions_worker_yml(dist, ports, tmp_path / "data"))
    assert config["workerPort"] == 10003
    assert config["workerId"] == "standalone"
    assert config["pulsarServiceUrl"] == "pulsar://127.0.0.1:10001"
    runtime = config["functionRuntimeFactoryConfigs"]
    assert runtime["pythonInstanceLocation"].endswith("python-instance/python_instance_main.py")
    assert runtime["logDirectory"] == str(tmp_path / "data" / "logs")


def test_ports_are_validated() -> None:
    with pytest.raises(ConfigurationError):
        StandalonePorts(broker=1, web=1, worker=2)
    with pytest.raises(ConfigurationError):
        StandalonePorts(broker=0, web=1, worker=2)
    picked = StandalonePorts.pick()
    assert len({picked.broker, picked.web, picked.worker}) == 3
    assert StandalonePorts.from_json(picked.to_json()) == picked


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ("garbage", None),
    ],
)
def test_java_major_parsing(output: str, major: int | None) -> None:
    assert _java_major(output) == major


def test_cache_dir_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PULSAR_STATE_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("PULSAR_STATE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x" / "pulsar-shared-state"


def test_bad_version_is_rejected() -> None:
    with pytest.raises(ValueError):
        PulsarDistribution(version="latest")


def test_missing_maven_is_a_clear_setup_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn here
    with pytest.raises(BrokerSetupError, match="Maven"):
        PulsarDistribution(version="9.9.9", cache_dir=tmp_path).ensure()


def test_checksum_mismatch_removes_the_download(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(dist_mod.KNOWN_SHA512, "9.9.9", "0" * 128)
    tarball = tmp_path / "bad.tar.gz"
    tarball.write_bytes(b"not the distribution")
    dist = PulsarDistribution(version="9.9.9", cache_dir=tmp_path)
    with pytest.raises(BrokerSetupError, match="failed verification"):
        dist._verify(tarball)
    assert not tarball.exists()


def test_corrupt_or_wrong_tarball_is_refused(tmp_path: Path) -> None:
    dist = PulsarDistribution(version="9.9.9", cache_dir=tmp_path)
    corrupt = tmp_path / "corrupt.tar.gz"
    corrupt.write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(BrokerSetupError, match="corrupt"):
        dist._unpack(corrupt)
    wrong = tmp_path / "wrong.tar.gz"
    with tarfile.open(wrong, "w:gz") as tar:
        info = tarfile.TarInfo("something-else/README")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(BrokerSetupError, match="bin/pulsar"):
        dist._unpack(wrong)
    assert not dist.is_ready()


def test_unpack_is_atomic_and_marks_the_tree(tmp_path: Path) -> None:
    dist = PulsarDistribution(version="9.9.9", cache_dir=tmp_path)
    good = tmp_path / "good.tar.gz"
    with tarfile.open(good, "w:gz") as tar:
        info = tarfile.TarInfo("apache-pulsar-9.9.9/bin/pulsar")
        info.size = 5
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(b"#!/bi"))
    dist._unpack(good)
    assert dist.is_ready()
    assert not list(tmp_path.glob(".unpack-*"))


def test_every_error_shares_one_root() -> None:
    assert issubclass(BrokerSetupError, PulsarStateError)
    assert issubclass(ConfigurationError, ValueError)
