"""The built wheel installs and works in a fresh venv (issue #15).

Runs ``tests/wheel_check.py``: the sdist and the wheel built from it as
``make package`` builds them (the sdist checked for LICENSE, README, configs),
installed with its dependencies into a throwaway venv under
``.cache/wheel-check/``; there the package and ``pulsar_state.testing`` import
from the venv, the shipped function configs are package data, and the
``pulsar-state`` entry point answers ``--help``. Slow: a venv and an install
(about a minute with pip's cache warm). Needs no broker.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import run_check_script

SCRIPT = Path(__file__).resolve().parent.parent / "wheel_check.py"
TIMEOUT_S = 900


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT_S + 60)
def test_the_wheel_installs_and_runs_in_a_fresh_venv() -> None:
    stdout = run_check_script(SCRIPT, timeout_s=TIMEOUT_S)
    assert "imported pulsar_state, pulsar_state.testing, pulsar_state.deploy" in stdout
    assert "package data present: " in stdout
    assert "wheel check passed" in stdout
