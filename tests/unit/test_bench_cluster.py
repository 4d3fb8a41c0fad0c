"""``make bench-cluster``'s own logic and the launcher's bookie settings it relies on.

No cluster: the bench itself runs with ``make bench-cluster`` (``--smoke`` for a
tiny run). The bench's bookies fsync through :attr:`ClusterConfig.bookie_settings`;
the default cluster's bookie settings stay as they were.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import peers_cluster
from bench.peers import SMOKE_RESULTS
from pulsar_state.deploy.cluster import ClusterInfo
from pulsar_state.deploy.cluster_config import (
    BookiePorts,
    BrokerPorts,
    ClusterConfig,
    ClusterPorts,
    bookie_settings,
)
from pulsar_state.deploy.cluster_launch import ClusterFiles
from pulsar_state.deploy.distribution import PulsarDistribution
from pulsar_state.errors import ConfigurationError

DATA = Path("/data/cluster")


def _ports() -> ClusterPorts:
    return ClusterPorts(
        zookeeper=20000,
        zookeeper_metrics=20001,
        bookies=(BookiePorts(bookie=20100, stats=20101), BookiePorts(bookie=20102, stats=20103)),
        brokers=(BrokerPorts(service=20200, web=20201), BrokerPorts(service=20202, web=20203)),
    )


def _info() -> ClusterInfo:
    return ClusterInfo(
        cluster_name="local",
        service_urls=("pulsar://127.0.0.1:1", "pulsar://127.0.0.1:2"),
        admin_urls=("http://127.0.0.1:3", "http://127.0.0.1:4"),
        superuser_token=None,
        token_file=None,
        data_dir="/tmp/x",
        version="4.0.8",
        functions=False,
        started_at=0.0,
    )


# -- the launcher's bookie settings ----------------------------------------------------------


def test_bookie_settings_of_the_config_win_and_the_default_adds_none() -> None:
    plain = bookie_settings(_ports(), 0, DATA)
    assert ClusterConfig().bookie_settings == {}
    assert bookie_settings(_ports(), 0, DATA, ClusterConfig().bookie_settings) == plain
    assert "journalSyncData" not in plain  # the distribution's bookkeeper.conf decides
    extra = {"journalSyncData": "true", "journalFlushWhenQueueEmpty": "false"}
    settings = bookie_settings(_ports(), 1, DATA, extra)
    assert settings["journalSyncData"] == "true"
    assert settings["journalFlushWhenQueueEmpty"] == "false"  # the extra wins
    assert settings["bookiePort"] == "20102"


def test_bookie_settings_must_map_str_to_str() -> None:
    with pytest.raises(ConfigurationError, match="bookie_settings"):
        ClusterConfig(bookie_settings={"journalSyncData": True})  # type: ignore[dict-item]


def test_the_rendered_bookie_conf_carries_the_config_s_bookie_settings(tmp_path: Path) -> None:
    dist = PulsarDistribution(version="9.9.9", cache_dir=tmp_path / "cache")
    conf = dist.root / "conf"
    conf.mkdir(parents=True)
    (conf / "zookeeper.conf").write_text("clientPort=2181\n")
    (conf / "bookkeeper.conf").write_text("bookiePort=3181\njournalSyncData=false\n")
    (conf / "broker.conf").write_text("brokerServicePort=6650\n")
    (conf / "functions_worker.yml").write_text("workerPort: 6750\n")
    config = ClusterConfig(bookies=2, bookie_settings={"journalSyncData": "true"})
    files = ClusterFiles(data_dir=tmp_path / "c", distribution=dist, config=config, python="py")
    files.render(_ports(), None)
    for i in range(2):
        text = files.conf(f"bookie-{i}").read_text()
        assert "journalSyncData=true" in text and "journalSyncData=false" not in text


# -- the bench ---------------------------------------------------------------------------------


def test_the_cluster_bench_defaults_and_refusals() -> None:
    args = peers_cluster.parse_args([])
    assert args.chosen == ["put", "read", "cas"]  # no bootstrap unless asked
    assert (args.brokers, args.bookies) == (2, 2)
    assert args.via_list == ["owner", "non-owner"]
    assert args.data_dir == peers_cluster.DATA_DIR
    smoke = peers_cluster.parse_args(["--smoke"])
    assert smoke.out == SMOKE_RESULTS and smoke.rounds == 1
    for bad in (["--via", "proxy"], ["--via", ""], ["--brokers", "1"]):
        with pytest.raises(SystemExit):
            peers_cluster.parse_args(bad)
    assert peers_cluster.parse_args(["--brokers", "1", "--via", "owner"]).via_list == ["owner"]


def test_a_column_gives_the_owner_s_urls_or_another_broker_s() -> None:
    info = _info()
    owners = {"t0": 0, "t1": 1}
    owner = peers_cluster.via_urls(info, owners.__getitem__, owner=True)
    other = peers_cluster.via_urls(info, owners.__getitem__, owner=False)
    assert owner("t0") == ("pulsar://127.0.0.1:1", "http://127.0.0.1:3")
    assert owner("t1") == ("pulsar://127.0.0.1:2", "http://127.0.0.1:4")
    assert other("t0") == owner("t1") and other("t1") == owner("t0")


def test_a_lookup_s_broker_url_names_the_owner() -> None:
    assert peers_cluster.owner_index(_info(), "pulsar://127.0.0.1:2") == 1
    assert peers_cluster.owner_index(_info(), "pulsar://127.0.0.1:1/") == 0
    with pytest.raises(RuntimeError, match="not a broker"):
        peers_cluster.owner_index(_info(), "pulsar://127.0.0.1:9")


def _summary(columns: list[str], etcd: str, value: float) -> dict[str, object]:
    ratios = [
        {"ours": "pulsar-map", "peer": peer, "column": c, "values": [value, value * 2, value * 3]}
        for peer in (etcd, "zookeeper")
        for c in columns
    ]
    return {
        "meta": {"columns": columns, "run": "R"},
        "put": {"etcd_reference": etcd, "ratios": ratios},
    }


def test_the_standalone_s_ratios_stand_beside_the_cluster_s() -> None:
    cluster = _summary([peers_cluster.OWNER, peers_cluster.NON_OWNER], "etcd-etcd3", 0.5)
    standalone = _summary(["fsync on", "fsync off"], "etcd-aetcd", 0.25)
    lines = peers_cluster.beside_standalone(cluster, standalone)
    text = "\n".join(lines)
    assert "| cluster, via owner | cluster, via non-owner |" in text
    # each run against its own etcd reference: medians 0.50 (standalone), 1.00 (cluster)
    assert "| put | pulsar-map / etcd | 0.50 | 1.00 | 1.00 |" in text
    assert "| put | pulsar-map / zookeeper | 0.50 | 1.00 | 1.00 |" in text
    assert "pulsar-meta" not in text  # no figures, no row
    assert peers_cluster.beside_standalone(cluster, None) == []


def test_the_report_states_the_conditions() -> None:
    args = peers_cluster.parse_args(["--bookies", "3"])
    text = "\n".join(peers_cluster.header(args, _info(), (0.0, 0.0)))
    assert "2 brokers, 3 bookie(s)" in text
    assert "ensemble 3, write quorum 3, ack quorum 3" in text
    assert "`journalSyncData=true`" in text
    assert "**via owner**" in text and "**via non-owner**" in text
    assert "Smoke run" not in text and "busy" not in text
