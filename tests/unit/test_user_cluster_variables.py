"""The suite never reaches a user's cluster by accident (issue #28).

A user who exports ``PULSAR_SERVICE_URL``/``PULSAR_ADMIN_URL`` (and a token)
for the CLI, then runs ``make test``, used to run the whole suite against that
cluster. The suite now takes its broker from ``PULSAR_STATE_TEST_*`` only, and
``conftest.py`` drops the CLI's variables, so no CLI or function it starts
inherits them either.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_PROBE = "PSS_USER_VARIABLES_PROBE"
USER_ENV = {
    "PULSAR_SERVICE_URL": "pulsar://users-cluster.invalid:6650",
    "PULSAR_ADMIN_URL": "http://users-cluster.invalid:8080",
    "PULSAR_AUTH_TOKEN": "users-token",
}


@pytest.mark.skipif(_PROBE not in os.environ, reason="run by the test below, in a child pytest")
def test_probe_sees_none_of_them() -> None:
    from harness import TEST_ADMIN_URL_ENV, TEST_SERVICE_URL_ENV  # noqa: PLC0415

    assert not set(USER_ENV) & set(os.environ)
    assert (TEST_SERVICE_URL_ENV, TEST_ADMIN_URL_ENV) == (
        "PULSAR_STATE_TEST_SERVICE_URL",
        "PULSAR_STATE_TEST_ADMIN_URL",
    )


def test_a_users_cluster_variables_are_dropped_with_a_warning() -> None:
    here = Path(__file__)
    env = {**os.environ, **USER_ENV, _PROBE: "1"}
    env.pop("PULSAR_STATE_TEST_SERVICE_URL", None)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"{here}::test_probe_sees_none_of_them",
        ],
        cwd=here.parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    assert "ignoring PULSAR_SERVICE_URL, PULSAR_ADMIN_URL, PULSAR_AUTH_TOKEN" in run.stdout
