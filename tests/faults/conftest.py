"""Fault tests: scale (short in CI, full with ``make test-faults``) and the report.

``PULSAR_STATE_FAULTS=full`` runs longer histories with more faults;
``PULSAR_STATE_FAULTS_REPORT=<file>`` writes the figures of every fault test
of the session to that Markdown file. The fixtures live in
``tests/fault_report.py``, shared with the cluster tier.
"""

from __future__ import annotations

from fault_report import fault_report, fault_scale

__all__ = ["fault_report", "fault_scale"]
