"""The local cluster's pure side: its shape, ports, each process's settings, the CLI's refusals.

Nothing here starts a process: the settings are checked as dictionaries and as
files rendered from a fake distribution's templates.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from pulsar_state.cli import main
from pulsar_state.deploy.cluster import ClusterInfo, LocalCluster
from pulsar_state.deploy.cluster_config import (
    BookiePorts,
    BrokerPorts,
    ClusterConfig,
    ClusterPorts,
    bookie_settings,
    broker_settings,
    functions_worker_config,
    merge_properties,
    zookeeper_settings,
)
from pulsar_state.deploy.cluster_launch import ClusterFiles
from pulsar_state.deploy.distribution import PulsarDistribution
from pulsar_state.deploy.errors import BrokerNotRunningError
from pulsar_state.deploy.token_auth import TokenAuthority
from pulsar_state.errors import ConfigurationError

DATA = Path("/data/cluster")
PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"


def _ports(brokers: int = 2, bookies: int = 1) -> ClusterPorts:
    return ClusterPorts(
        zookeeper=20000,
        zookeeper_metrics=20001,
        bookies=tuple(
            BookiePorts(bookie=20100 + 2 * i, stats=20101 + 2 * i) for i in range(bookies)
        ),
        brokers=tuple(
            BrokerPorts(service=20200 + 2 * i, web=20201 + 2 * i) for i in range(brokers)
        ),
    )


# -- the shape ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"brokers": 0}, ConfigurationError),
        ({"brokers": 6}, ConfigurationError),
        ({"brokers": "2"}, TypeError),
        ({"brokers": True}, TypeError),
        ({"bookies": 0}, ConfigurationError),
        ({"bookies": 4}, ConfigurationError),
        ({"auth": "basic"}, ConfigurationError),
        ({"auth": "none"}, ConfigurationError),
        ({"functions": "yes"}, TypeError),
        ({"cluster_name": "a b"}, ConfigurationError),
        ({"cluster_name": ""}, ConfigurationError),
        ({"start_timeout_s": 0}, ConfigurationError),
        ({"broker_settings": {"a": 1}}, ConfigurationError),
        ({"broker_mem": None}, TypeError),
    ],
)
def test_a_bad_shape_is_refused_at_construction(
    kwargs: dict[str, object], error: type[Exception], tmp_path: Path
) -> None:
    with pytest.raises(error):
        ClusterConfig(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(error):
        LocalCluster(data_dir=tmp_path, **kwargs)  # type: ignore[arg-type]


def test_the_defaults_are_two_brokers_one_bookie_no_auth_no_functions() -> None:
    config = ClusterConfig()
    assert (config.brokers, config.bookies, config.auth, config.functions) == (2, 1, None, False)
    assert config.tls is False
    assert "UseG1GC" in config.gc
    assert all(
        "-Xmx" in mem for mem in (config.zookeeper_mem, config.bookie_mem, config.broker_mem)
    )
    assert ClusterConfig(brokers=5, bookies=3, auth="token", functions=True).layout() == {
        "brokers": 5,
        "bookies": 3,
        "auth": "token",
        "tls": False,
        "cluster_name": "local",
    }


# -- ports -------------------------------------------------------------------------------


def test_picked_ports_are_all_distinct_and_survive_json() -> None:
    ports = ClusterPorts.pick(brokers=5, bookies=3)
    named = ports.named()
    assert len(named) == 2 + 2 * 3 + 2 * 5
    assert len({port for _, port in named}) == len(named)
    assert ClusterPorts.from_json(ports.to_json()) == ports
    assert ports.brokers[4].service_url.startswith("pulsar://127.0.0.1:")
    assert ports.metadata_store_url == f"zk:127.0.0.1:{ports.zookeeper}"


def test_ports_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="differ"):
        ClusterPorts(
            zookeeper=1000,
            zookeeper_metrics=1001,
            bookies=(BookiePorts(bookie=1002, stats=1003),),
            brokers=(BrokerPorts(service=1004, web=1000),),
        )
    with pytest.raises(ConfigurationError, match=r"1\.\.65535"):
        ClusterPorts(
            zookeeper=0,
            zookeeper_metrics=1001,
            bookies=(BookiePorts(bookie=1002, stats=1003),),
            brokers=(BrokerPorts(service=1004, web=1005),),
        )
    with pytest.raises(ConfigurationError):
        ClusterPorts(zookeeper=1000, zookeeper_metrics=1001, bookies=(), brokers=())


# -- settings ----------------------------------------------------------------------------


def test_zookeeper_listens_on_loopback_and_keeps_its_data_in_the_data_dir() -> None:
    settings = zookeeper_settings(_ports(), DATA)
    assert settings["clientPort"] == "20000"
    assert settings["clientPortAddress"] == "127.0.0.1"
    assert settings["dataDir"] == str(DATA / "data" / "zookeeper")
    assert settings["admin.enableServer"] == "false"
    assert settings["metricsProvider.httpPort"] == "20001"


def test_each_bookie_has_its_own_port_and_directories_and_allows_loopback() -> None:
    ports = _ports(bookies=3)
    settings = [bookie_settings(ports, i, DATA) for i in range(3)]
    for i, bookie in enumerate(settings):
        assert bookie["bookiePort"] == str(ports.bookies[i].bookie)
        assert bookie["prometheusStatsHttpPort"] == str(ports.bookies[i].stats)
        assert bookie["allowLoopback"] == "true"
        assert bookie["advertisedAddress"] == "127.0.0.1"
        assert bookie["metadataServiceUri"] == "metadata-store:zk:127.0.0.1:20000"
        assert Path(bookie["journalDirectory"]).is_absolute()
    assert len({b["journalDirectory"] for b in settings}) == 3
    assert len({b["ledgerDirectories"] for b in settings}) == 3


def test_each_broker_has_its_own_ports_and_writes_to_every_bookie() -> None:
    config = ClusterConfig(brokers=3, bookies=2)
    ports = _ports(brokers=3, bookies=2)
    settings = [broker_settings(config, ports, i) for i in range(3)]
    for i, broker in enumerate(settings):
        assert broker["brokerServicePort"] == str(ports.brokers[i].service)
        assert broker["webServicePort"] == str(ports.brokers[i].web)
        assert broker["bindAddress"] == broker["advertisedAddress"] == "127.0.0.1"
        assert broker["clusterName"] == "local"
        assert broker["metadataStoreUrl"] == "zk:127.0.0.1:20000"
        assert broker["configurationMetadataStoreUrl"] == "zk:127.0.0.1:20000"
        for quorum in ("EnsembleSize", "WriteQuorum", "AckQuorum"):
            assert broker[f"managedLedgerDefault{quorum}"] == "2"
        assert broker["brokerDeleteInactiveTopicsEnabled"] == "false"
        assert broker["functionsWorkerEnabled"] == "false"
        assert "authenticationEnabled" not in broker


def test_token_auth_turns_on_authentication_authorization_and_the_brokers_own_client() -> None:
    authority = TokenAuthority()
    config = ClusterConfig(auth="token", broker_settings={"superUserRoles": "admin,ops"})
    settings = broker_settings(config, _ports(), 1, authority)
    assert settings["authenticationEnabled"] == "true"
    assert settings["authorizationEnabled"] == "true"
    assert settings["authenticationProviders"] == PROVIDER
    assert settings["tokenSecretKey"].startswith("data:;base64,")
    assert settings["brokerClientAuthenticationPlugin"].endswith("AuthenticationToken")
    assert settings["brokerClientAuthenticationParameters"] == (
        f"token:{authority.superuser_token}"
    )
    assert settings["superUserRoles"] == "admin,ops"  # the caller's settings win


def test_the_functions_worker_runs_on_its_brokers_web_port_with_yaml_lists() -> None:
    authority = TokenAuthority()
    config = ClusterConfig(functions=True, bookies=2, auth="token")
    ports = _ports(bookies=2)
    template = {"workerId": "standalone", "functionRuntimeFactoryConfigs": {"logDirectory": "x"}}
    worker = functions_worker_config(
        template,
        config,
        ports,
        1,
        data_dir=DATA,
        python_instance=Path("/dist/python_instance_main.py"),
        distribution_root=Path("/dist"),
        authority=authority,
    )
    assert worker["workerPort"] == ports.brokers[1].web
    assert worker["pulsarServiceUrl"] == ports.brokers[1].service_url
    assert worker["pulsarFunctionsCluster"] == "local"
    assert worker["numFunctionPackageReplicas"] == 2
    assert worker["downloadDirectory"] == str(DATA / "download" / "broker-1")
    assert worker["functionRuntimeFactoryConfigs"]["logDirectory"] == str(
        DATA / "logs" / "functions-broker-1"
    )
    assert worker["authenticationProviders"] == [PROVIDER]
    assert worker["superUserRoles"] == ["admin"]
    assert worker["properties"]["tokenSecretKey"].startswith("data:;base64,")
    assert template["workerId"] == "standalone"  # the template is not changed


def test_properties_are_set_in_place_or_appended() -> None:
    template = "# port=1\nport=6650\nname = old\nkeep=yes\n"
    text = merge_properties(template, {"port": "7000", "name": "new", "added": "1"})
    assert text.splitlines()[:4] == ["# port=1", "port=7000", "name=new", "keep=yes"]
    assert text.rstrip().endswith("added=1")


def test_rendered_files_of_a_fake_distribution(tmp_path: Path) -> None:
    dist = PulsarDistribution(version="9.9.9", cache_dir=tmp_path / "cache")
    conf = dist.root / "conf"
    conf.mkdir(parents=True)
    (conf / "zookeeper.conf").write_text("dataDir=data/zookeeper\nclientPort=2181\n")
    (conf / "bookkeeper.conf").write_text("bookiePort=3181\nallowLoopback=false\n")
    (conf / "broker.conf").write_text("brokerServicePort=6650\nauthenticationEnabled=false\n")
    (conf / "functions_worker.yml").write_text("workerPort: 6750\n")
    config = ClusterConfig(functions=True, auth="token")
    files = ClusterFiles(data_dir=tmp_path / "c", distribution=dist, config=config, python="py")
    files.render(_ports(), TokenAuthority())
    broker = files.conf("broker-1").read_text()
    assert broker.count("brokerServicePort=20202") == 1
    assert "authenticationEnabled=true" in broker
    assert "allowLoopback=true" in files.conf("bookie-0").read_text()
    assert f"dataDir={tmp_path / 'c' / 'data' / 'zookeeper'}" in files.conf("zookeeper").read_text()
    worker = yaml.safe_load(files.conf("functions-worker-0").read_text())
    assert worker["workerPort"] == 20201
    env = files.env("broker-0", config.broker_mem)
    assert env["PULSAR_MEM"] == config.broker_mem
    assert env["PULSAR_GC"] == config.gc
    assert env["PULSAR_LOG_DIR"] == str(tmp_path / "c" / "logs")


# -- the cluster object without processes ----------------------------------------------------


def test_cluster_info_names_every_broker(tmp_path: Path) -> None:
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
    )
    assert info.service_url == "pulsar://127.0.0.1:1,127.0.0.1:2"
    text = info.describe()
    assert "broker.1.admin_url=http://127.0.0.1:4" in text
    assert f"token_file={tmp_path / 'admin.token'}" in text
    assert ClusterInfo.from_dict(json.loads(json.dumps(info.__dict__))) == info


def test_nothing_runs_on_an_empty_data_dir(tmp_path: Path) -> None:
    cluster = LocalCluster(data_dir=tmp_path)
    assert cluster.status() is None
    assert cluster.processes() == {}
    assert cluster.broker_pid(0) is None
    assert cluster.stop() is False
    with pytest.raises(BrokerNotRunningError):
        cluster.kill_broker(0)
    with pytest.raises(BrokerNotRunningError):
        cluster.start_broker(0)
    with pytest.raises(BrokerNotRunningError):
        cluster.token("reader")  # never started with auth: no secret
    with pytest.raises(ConfigurationError):
        cluster.token("../escape")


def test_a_data_dir_of_another_shape_needs_a_fresh_start(tmp_path: Path) -> None:
    LocalCluster(data_dir=tmp_path, brokers=2)._ports()
    (tmp_path / "data").mkdir()
    again = LocalCluster(data_dir=tmp_path, brokers=2)._ports()
    assert len(again.brokers) == 2  # the same layout keeps its ports
    with pytest.raises(ConfigurationError, match="fresh"):
        LocalCluster(data_dir=tmp_path, brokers=3)._ports()


# -- the CLI's refusals --------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["start", "--brokers", "0"],
        ["start", "--brokers", "6"],
        ["start", "--bookies", "4"],
        ["start", "--auth", "basic"],
        ["kill-broker", "5"],
        ["start-broker", "x"],
    ],
)
def test_bad_cli_input_is_a_usage_error(args: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["cluster", *args, "--data-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "Invalid value" in result.output


def test_cli_status_and_stop_of_no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULSAR_STATE_CLUSTER_DIR", str(tmp_path / "from-env"))
    status = CliRunner().invoke(main, ["cluster", "status"])
    assert status.exit_code == 1
    assert f"not running (data dir {tmp_path / 'from-env'})" in status.output
    stop = CliRunner().invoke(main, ["cluster", "stop", "--data-dir", str(tmp_path)])
    assert stop.exit_code == 0
    assert "no cluster was running" in stop.output
    killed = CliRunner().invoke(main, ["cluster", "kill-broker", "0", "--data-dir", str(tmp_path)])
    assert killed.exit_code == 1
    assert "no cluster" in killed.output
