"""``pulsar-state cluster restart-broker`` and ``LocalCluster.restart_broker``: the
arguments they refuse and what they say with no cluster running (the restart
itself runs on a real cluster: tests/cluster/test_rolling_restart.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pulsar_state.cli import main
from pulsar_state.deploy.cluster import LocalCluster
from pulsar_state.deploy.errors import BrokerNotRunningError


@pytest.mark.parametrize(
    "args",
    [
        ["restart-broker"],
        ["restart-broker", "x"],
        ["restart-broker", "-1"],
        ["restart-broker", "5"],
        ["restart-broker", "0", "--timeout", "0"],
        ["restart-broker", "0", "--timeout", "soon"],
    ],
)
def test_bad_arguments_are_usage_errors(args: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["cluster", *args, "--data-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert any(
        what in result.output for what in ("Missing argument", "Invalid value", "No such option")
    )


def test_no_cluster_to_restart(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["cluster", "restart-broker", "1", "--timeout", "30", "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 1, result.output
    assert "no cluster" in result.output
    with pytest.raises(BrokerNotRunningError):
        LocalCluster(data_dir=tmp_path).restart_broker(0)


def test_the_command_is_listed() -> None:
    shown = CliRunner().invoke(main, ["cluster", "--help"])
    assert shown.exit_code == 0
    assert "restart-broker" in shown.output
