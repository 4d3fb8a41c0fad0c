"""Every floor of setup.py holds (issue #15, item 4; issue #28, item 3).

Runs ``tests/min_deps.py`` (also ``make check-min-deps``), in two passes: a
throwaway venv with every requirement pinned to the lowest version setup.py
allows (``pulsar-client``, ``requests``, ``click``, ... and the ``spark``
extra's ``pyspark`` and ``pyarrow``; then the ``spark-streaming`` extra's), the
package installed into it; the core writes a map on the floor client (both of
its send paths) and the Spark source, found by Spark itself, reads a map of
the test broker as a snapshot; on the batch floor (PySpark 4.0) a stream and
a pushdown read are refused with the release they need, on the streaming
floor an ``availableNow`` stream reads the changes (issue #28, item 9).
Slow: the first run downloads and builds PySpark (~450 MB, a few
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
def test_the_core_and_the_spark_source_work_at_the_lowest_allowed_versions(
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
    assert "pass batch passed" in stdout and "pass streaming passed" in stdout
    assert "pulsar-client 3.5" in stdout  # the floor, not the newest
    assert "pyspark 4.0.0" in stdout and "pyspark 4.2.0" in stdout
    assert "core on the floor client: " in stdout
    assert "snapshot read (the source found by Spark itself): " in stdout
    assert "pushdown refused: needs PySpark >= 4.1" in stdout
    assert "a stream refused: needs PySpark >= 4.2" in stdout
    assert "availableNow stream: " in stdout
