"""setup.py's floors for the Spark extra hold (issue #15, item 4).

Runs ``tests/min_deps.py`` (also ``make check-min-deps``): a throwaway venv
with ``pyspark`` and ``pyarrow`` pinned to the lowest versions setup.py
allows, the package installed into it, and a map of the test broker read
through the Spark source there, as a snapshot and as an ``availableNow``
stream. Slow: the first run downloads and builds PySpark (~450 MB, a few
minutes); pip's cache makes later runs about a minute or two.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from harness import PulsarEndpoint

SCRIPT = Path(__file__).resolve().parent.parent / "min_deps.py"
TIMEOUT_S = 2400


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT_S + 60)
def test_spark_source_works_at_the_lowest_allowed_versions(
    pulsar_endpoint: PulsarEndpoint,
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--service-url",
            pulsar_endpoint.service_url,
            "--admin-url",
            pulsar_endpoint.admin_url,
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "min-deps check passed" in done.stdout
    assert "snapshot read: " in done.stdout
    assert "availableNow stream: " in done.stdout
