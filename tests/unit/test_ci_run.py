"""``.ci/run``: the README's test command, then its main job; either failing fails CI.

The script runs in a scratch copy of the repository layout whose ``make`` and
``.venv/bin/pulsar-state`` only record how they were called, so what is tested
is the script's own control flow: the order of the steps, the exit codes, and
that the embedded broker of ``make run`` is stopped whatever happens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CI_RUN = REPO_ROOT / ".ci" / "run"

RECORDER = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$CALLS"
case "$(basename "$0") $1" in
  "make test") exit "${TEST_RC:-0}" ;;
  "make run") exit "${RUN_RC:-0}" ;;
esac
exit 0
"""


def _run_ci(tmp_path: Path, script: Path = CI_RUN, **codes: int) -> tuple[int, list[str]]:
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(script, repo / ".ci" / "run")
    bin_dir, venv_bin = tmp_path / "bin", repo / ".venv" / "bin"
    for path in (bin_dir / "make", venv_bin / "pulsar-state"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(RECORDER)
        path.chmod(0o755)
    calls = tmp_path / "calls"
    calls.touch()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "CALLS": str(calls),
        **{name.upper(): str(rc) for name, rc in codes.items()},
    }
    proc = subprocess.run(
        ["bash", str(repo / ".ci" / "run")], env=env, timeout=60, check=False, cwd=tmp_path
    )
    return proc.returncode, calls.read_text().splitlines()


def test_ci_runs_the_suite_then_the_main_job(tmp_path: Path) -> None:
    rc, calls = _run_ci(tmp_path)
    assert rc == 0
    assert [c for c in calls if c.startswith("make")] == ["make test", "make run"]
    assert "pulsar-state broker stop --data-dir .pulsar/run" in calls


@pytest.mark.parametrize(("test_rc", "run_rc"), [(5, 0), (1, 0), (0, 2)])
def test_ci_fails_when_either_step_fails(tmp_path: Path, test_rc: int, run_rc: int) -> None:
    rc, calls = _run_ci(tmp_path, test_rc=test_rc, run_rc=run_rc)
    assert rc != 0
    made = [c for c in calls if c.startswith("make")]
    # a failed suite stops the job before the main job runs
    assert made == (["make test"] if test_rc else ["make test", "make run"])
    assert "pulsar-state broker stop --data-dir .pulsar/run" in calls
