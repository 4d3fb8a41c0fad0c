"""The distribution download shows progress: the watcher reports a growing file."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pulsar_state.deploy.download_progress import largest_file_size, watch_download


def test_reports_the_growth_of_a_file_written_by_another_writer(tmp_path: Path) -> None:
    reported: list[int] = []
    chunks = 8

    def download() -> None:  # as the resolver does: a temporary name, then the file
        part = tmp_path / "artifact.tar.gz.part"
        with part.open("wb") as f:
            for _ in range(chunks):
                f.write(b"x" * 1000)
                f.flush()
                time.sleep(0.05)
        part.rename(tmp_path / "artifact.tar.gz")

    with watch_download(
        tmp_path, "artifact", total=8000, label="t", report=reported.append, interval_s=0.01
    ):
        writer = threading.Thread(target=download)
        writer.start()
        writer.join(10)
    assert reported, "no progress was reported"
    assert reported == sorted(reported), reported
    assert len(set(reported)) >= 3, f"progress in too few steps: {reported}"
    assert reported[-1] == chunks * 1000


def test_other_files_and_a_missing_folder_count_as_nothing(tmp_path: Path) -> None:
    (tmp_path / "_remote.repositories").write_bytes(b"y" * 50)
    assert largest_file_size(tmp_path, "artifact") == 0
    assert largest_file_size(tmp_path / "absent", "artifact") == 0
    reported: list[int] = []
    with watch_download(
        tmp_path / "absent",
        "artifact",
        total=None,
        label="t",
        report=reported.append,
        interval_s=0.01,
    ):
        time.sleep(0.05)
    assert reported == []
