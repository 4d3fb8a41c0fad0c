"""``pulsar-state cluster kill-bookie|start-bookie``: wired to :class:`LocalCluster`.

The commands call ``kill_bookie``/``start_bookie`` of the cluster on the data
directory given; an index out of range is a usage error (exit 2); with no
cluster running they fail with "no cluster" (exit 1). The real kill and start
run on a cluster in ``tests/cluster/test_bookie_loss.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from pulsar_state.cli import main
from pulsar_state.deploy.cluster import LocalCluster
from pulsar_state.deploy.errors import BrokerNotRunningError


def test_kill_bookie_and_start_bookie_call_the_cluster_of_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, Path, int]] = []

    def recorder(what: str) -> Callable[[LocalCluster, int], object]:
        def call(self: LocalCluster, index: int) -> object:
            calls.append((what, self.data_dir, index))
            return f"127.0.0.1:{4000 + index}"

        return call

    monkeypatch.setattr(LocalCluster, "kill_bookie", recorder("kill"))
    monkeypatch.setattr(LocalCluster, "start_bookie", recorder("start"))
    monkeypatch.setattr(LocalCluster, "bookie_id", recorder("id"))
    where = ["--data-dir", str(tmp_path)]
    killed = CliRunner().invoke(main, ["cluster", "kill-bookie", "2", *where])
    assert killed.exit_code == 0, killed.output
    assert "killed bookie-2" in killed.output
    started = CliRunner().invoke(main, ["cluster", "start-bookie", "1", *where])
    assert started.exit_code == 0, started.output
    assert "bookie-1 ready: 127.0.0.1:4001" in started.output
    assert calls == [
        ("kill", tmp_path.resolve(), 2),
        ("start", tmp_path.resolve(), 1),
        ("id", tmp_path.resolve(), 1),
    ]


@pytest.mark.parametrize("args", [["kill-bookie", "3"], ["start-bookie", "-1"], ["kill-bookie"]])
def test_a_bookie_index_out_of_range_is_a_usage_error(args: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["cluster", *args, "--data-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output


@pytest.mark.parametrize("command", ["kill-bookie", "start-bookie"])
def test_with_no_cluster_running_the_commands_say_so(command: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["cluster", command, "0", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "no cluster" in result.output


def test_the_cluster_refuses_a_bookie_it_does_not_have(tmp_path: Path) -> None:
    cluster = LocalCluster(data_dir=tmp_path)
    with pytest.raises(BrokerNotRunningError):
        cluster.kill_bookie(0)
    with pytest.raises(BrokerNotRunningError):
        cluster.start_bookie(0)
    with pytest.raises(BrokerNotRunningError):
        cluster.bookie_id(0)
