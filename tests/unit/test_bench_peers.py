"""The peer benchmark's own logic: the etcd reference, the tables, set-up errors.

No servers: the bench itself runs with ``make bench`` (``--smoke`` for a tiny run).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import peer_clients, peer_runs, peers, peers_report
from bench.common import RESULTS, logged_journal_sync
from bench.local_server import BenchSetupError
from pulsar_state.deploy.standalone import StandaloneBroker


def _series(w: peers.Workload, system: str, column: str, values: list[float]) -> None:
    s = w.add(system, column)
    s.values += values
    s.p50_us += [1000.0 / v for v in values]
    s.p99_us += [4000.0 / v for v in values]


def _put_workload(etcd3: list[float], aetcd: list[float]) -> peers.Workload:
    w = peers.Workload("put", "sync put, one client", "ops/s", True)
    for column, scale in ((peers.ON, 1.0), (peers.OFF, 2.0)):
        _series(w, "pulsar-map", column, [100.0 * scale, 120.0 * scale, 110.0 * scale])
        _series(w, "pulsar-raw", column, [400.0, 400.0, 400.0])
    _series(w, "etcd-etcd3", peers.ON, etcd3)
    _series(w, "etcd-aetcd", peers.ON, aetcd)
    _series(w, "zookeeper", peers.ON, [50.0, 60.0, 55.0])
    return w


@pytest.mark.parametrize(
    ("etcd3", "aetcd", "faster"),
    [
        ([200.0, 210.0, 190.0], [150.0, 400.0, 140.0], "etcd-etcd3"),  # by median, not max
        ([100.0, 90.0, 95.0], [150.0, 160.0, 140.0], "etcd-aetcd"),
    ],
)
def test_the_faster_etcd_client_is_the_reference_and_both_are_reported(
    etcd3: list[float], aetcd: list[float], faster: str
) -> None:
    w = _put_workload(etcd3, aetcd)
    assert w.etcd_reference(peers.ON) == faster
    lines, records = peers_report._ratio_rows(w, [peers.ON, peers.OFF])
    text = "\n".join(lines)
    assert f"etcd reference: `{faster}`" in text
    assert "`etcd-etcd3`" in text and "`etcd-aetcd`" in text  # both clients' figures named
    slower = ({"etcd-etcd3", "etcd-aetcd"} - {faster}).pop()
    assert f"| pulsar-map / {faster} |" in text
    assert f"| pulsar-map / {slower} |" not in text
    ref = w.get(faster, peers.ON)
    assert ref is not None
    on = next(r for r in records if r["peer"] == faster and r["column"] == peers.ON)
    off = next(r for r in records if r["peer"] == faster and r["column"] == peers.OFF)
    assert on["values"] == pytest.approx(
        [a / b for a, b in zip([100, 120, 110], ref.values, strict=True)]
    )
    # the fsync-off column is compared with the same (always fsyncing) etcd figures
    assert off["values"] == pytest.approx(
        [a / b for a, b in zip([200, 240, 220], ref.values, strict=True)]
    )
    assert on["p99"] == pytest.approx(
        [(4000 / a) / (4000 / b) for a, b in zip([100, 120, 110], ref.values, strict=True)]
    )
    # pulsar-raw is compared within its own broker column
    raw_off = next(r for r in records if r["peer"] == "pulsar-raw" and r["column"] == peers.OFF)
    assert raw_off["values"] == pytest.approx([0.5, 0.6, 0.55])


def test_every_table_has_p50_and_p99_for_every_column() -> None:
    w = _put_workload([200.0, 210.0, 190.0], [150.0, 160.0, 140.0])
    lines = peers_report._system_table(w, [peers.ON, peers.OFF])
    assert lines[0].count("p50 µs") == 2 and lines[0].count("p99 µs") == 2
    assert "fsync on: ops/s" in lines[0] and "fsync off: ops/s" in lines[0]
    rows = {line.split("|")[1].strip(): line for line in lines[2:]}
    assert set(rows) == {"pulsar-map", "etcd-etcd3", "etcd-aetcd", "zookeeper", "pulsar-raw"}
    assert "(always fsyncs)" in rows["zookeeper"]
    assert "(always fsyncs)" not in rows["pulsar-map"]
    assert "220.0 (200.0-240.0)" in rows["pulsar-map"]  # fsync-off median (min-max)


def test_a_workload_measured_on_the_headline_broker_only_gets_one_column() -> None:
    w = peers.Workload("read", "linearizable read of one key", "ops/s", True)
    _series(w, "pulsar-map", peers.ON, [300.0])
    _series(w, "zookeeper", peers.ON, [200.0])
    measured = peers_report._columns(w, [peers.ON, peers.OFF])
    assert measured == [peers.ON]
    assert peers.OFF not in peers_report._system_table(w, measured)[0]


def test_busy_machine_and_smoke_runs_say_so_at_the_top() -> None:
    cores = os.cpu_count() or 1
    smoke = peers.parse_args(["--smoke"])
    head = "\n".join(peers._header(smoke, [peers.ON, peers.OFF], cores * 2.0, cores * 2.0)[:8])
    assert "Smoke run" in head and "busy shared machine" in head
    assert smoke.out == peers.SMOKE_RESULTS  # never the published bench/results
    quiet = peers.parse_args([])
    head = "\n".join(peers._header(quiet, [peers.ON, peers.OFF], 0.1, 0.2)[:8])
    assert "Smoke run" not in head and "busy" not in head
    assert quiet.out == RESULTS


def test_bad_arguments_are_refused_by_the_parser() -> None:
    with pytest.raises(SystemExit):
        peers.parse_args(["--systems", "etcd,redis"])
    with pytest.raises(SystemExit):
        peers.parse_args(["--workloads", "put,scan"])


def test_a_missing_client_is_a_clear_message_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.setitem(peer_clients.CLIENT_MODULES, "zookeeper", "no_such_client_module_xyz")
    with pytest.raises(BenchSetupError, match=r"no_such_client_module_xyz.*--systems"):
        peers.preflight(["zookeeper"])
    with pytest.raises(SystemExit) as exited:
        peers.main(["--smoke", "--systems", "zookeeper"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "bench: cannot run: zookeeper" in err and "Traceback" not in err


def test_the_environment_of_spawned_children_is_restored() -> None:
    key = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"
    before = os.environ.get(key)
    with peer_runs._environment({key: "python"}):
        assert os.environ[key] == "python"
    assert os.environ.get(key) == before


def test_the_journal_sync_setting_is_read_from_the_bookies_last_logged_config(
    tmp_path: Path,
) -> None:
    standalone = StandaloneBroker(data_dir=tmp_path, functions=False)
    assert logged_journal_sync(standalone) is None  # no log yet
    standalone.log_file.parent.mkdir(parents=True)
    standalone.log_file.write_text(
        '  "journalSyncData" : "false",\n...restart...\n  "journalSyncData" : "true",\n'
    )
    assert logged_journal_sync(standalone) is True


@pytest.mark.skipif(importlib.util.find_spec("etcd3") is None, reason="bench extra not installed")
def test_etcd3_imports_with_the_pure_python_protobuf_runtime_its_process_gets() -> None:
    env = {**os.environ, **peer_clients.CHILD_ENV["etcd-etcd3"]}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import etcd3, google.protobuf.internal.api_implementation as a;print(a.Type())",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "python"
