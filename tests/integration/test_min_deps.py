"""setup.py's floors for the Spark extra hold (issue #15, item 4).

Runs ``tests/min_deps.py`` (also ``make check-min-deps``): a throwaway venv
with ``pyspark`` and ``pyarrow`` pinned to the lowest versions setup.py
allows, the package installed into it, and a map of the test broker read
through the Spark source there, as a snapshot and as an ``availableNow``
stream. Slow: the first run downloads and builds PySpark (~450 MB, a few
minutes); pip's cache makes later runs about a minute or two.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import PulsarEndpoint, run_check_script

SCRIPT = Path(__file__).resolve().parent.parent / "min_deps.py"
TIMEOUT_S = 2400


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT_S + 60)
def test_spark_source_works_at_the_lowest_allowed_versions(
    pulsar_endpoint: PulsarEndpoint,
) -> None:
    stdout = run_check_script(
        SCRIPT,
        "--service-url",
        pulsar_endpoint.service_url,
        "--admin-url",
        pulsar_endpoint.admin_url,
        timeout_s=TIMEOUT_S,
    )
    assert "min-deps check passed" in stdout
    assert "snapshot read: " in stdout
    assert "availableNow stream: " in stdout
