"""Fault tests: scale (short in CI, full with ``make test-faults``) and the report.

``PULSAR_STATE_FAULTS=full`` runs longer histories with more faults;
``PULSAR_STATE_FAULTS_REPORT=<file>`` writes the figures of every fault test
of the session to that Markdown file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_report import SCALES, FaultReport, FaultScale


@pytest.fixture(scope="session")
def fault_scale() -> FaultScale:
    name = os.environ.get("PULSAR_STATE_FAULTS", "short")
    if name not in SCALES:
        raise pytest.UsageError(f"PULSAR_STATE_FAULTS must be one of {sorted(SCALES)}")
    return SCALES[name]


@pytest.fixture(scope="session")
def fault_report(fault_scale: FaultScale) -> Iterator[FaultReport]:
    report = FaultReport()
    yield report
    target = os.environ.get("PULSAR_STATE_FAULTS_REPORT")
    if target and report.rows:
        Path(target).write_text(report.markdown(fault_scale))
