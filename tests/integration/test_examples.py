"""The scripts in examples/ run as shipped, against the test broker (issue #28)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from harness import REPO_ROOT, PulsarEndpoint, unique_topic

EXAMPLES = REPO_ROOT / "examples"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("feature_flags.py", ["checkout-v2: True", "flipped to: False", "watched: MapChange("]),
        ("nightly_report.py", ["report 1 by ", "fencing token ", "leads the scheduler"]),
    ],
)
def test_an_example_runs_against_a_broker(
    pulsar_endpoint: PulsarEndpoint, script: str, expected: list[str]
) -> None:
    done = _run(
        str(EXAMPLES / script),
        "--service-url",
        pulsar_endpoint.service_url,
        "--admin-url",
        pulsar_endpoint.admin_url,
        "--topic",
        unique_topic(script.removesuffix(".py").replace("_", "-")),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for text in expected:
        assert text in done.stdout, done.stdout


def test_the_memory_map_example_passes_without_a_broker() -> None:
    done = _run(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLES / "test_with_memory_map.py")
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert "1 passed" in done.stdout
