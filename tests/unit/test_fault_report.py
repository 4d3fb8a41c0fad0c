"""tests/fault_report.py: each fault tier rewrites its own part of the report
and keeps the other's (``make test-faults`` the standalone's table,
``make test-faults-cluster`` the section "On a local cluster")."""

from __future__ import annotations

from pathlib import Path

from fault_report import CLUSTER_HEADING, SCALES, FaultReport

ROW = {"ops": 10, "ok": 9, "unknown": 1, "failed": 0, "faults": "1x f", "violations": 0, "lost": 0}


def _report(*tests: tuple[str, str]) -> FaultReport:
    report = FaultReport()
    for test, cluster in tests:
        report.add(test=test, cluster=cluster, **ROW)
    return report


def test_cluster_rows_replace_only_the_cluster_section(tmp_path: Path) -> None:
    path = tmp_path / "faults.md"
    _report(("standalone run", "")).write(path, SCALES["full"])
    path.write_text(path.read_text() + "\nConditions of this run, written by hand.\n")
    _report(("first cluster run", "2 brokers")).write(path, SCALES["full"])
    _report(("second cluster run", "1 broker, 3 bookies")).write(path, SCALES["short"])
    text = path.read_text()
    assert text.startswith("# Fault-injection report")
    assert "| standalone run | 10 (9 / 1 / 0) |" in text
    assert "Conditions of this run, written by hand." in text
    assert text.count(CLUSTER_HEADING) == 1
    assert "first cluster run" not in text
    assert "| second cluster run | 1 broker, 3 bookies | 10 (9 / 1 / 0) |" in text
    assert "- 1 broker, 3 bookies" in text  # the cluster's shape
    assert text.index("Conditions of this run") < text.index(CLUSTER_HEADING)


def test_standalone_rows_keep_the_cluster_section(tmp_path: Path) -> None:
    path = tmp_path / "faults.md"
    _report(("cluster run", "2 brokers")).write(path, SCALES["full"])
    assert path.read_text().startswith("# Fault-injection report")
    _report(("standalone run", "")).write(path, SCALES["full"])
    text = path.read_text()
    assert "| standalone run | 10 (9 / 1 / 0) |" in text
    assert "| cluster run | 2 brokers |" in text
    assert text.count(CLUSTER_HEADING) == 1
    assert text.index("standalone run") < text.index(CLUSTER_HEADING)


def test_one_session_of_both_tiers_writes_both(tmp_path: Path) -> None:
    path = tmp_path / "faults.md"
    _report(("standalone run", ""), ("cluster run", "2 brokers")).write(path, SCALES["full"])
    text = path.read_text()
    standalone, _, cluster = text.partition(CLUSTER_HEADING)
    assert "standalone run" in standalone and "cluster run" not in standalone
    assert "cluster run" in cluster and "standalone run" not in cluster
