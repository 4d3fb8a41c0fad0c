"""Progress of a download made by another process (Maven fetching the distribution).

Maven in batch mode prints no progress, and the first download is about 240 MB.
While it runs, a thread polls the artifact's folder in the local Maven
repository, where the resolver writes the file (under a temporary name first),
and reports the bytes so far: a ``tqdm`` bar on stderr by default.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

__all__ = ["largest_file_size", "watch_download"]


def largest_file_size(directory: Path, prefix: str) -> int:
    """Bytes of the largest file in ``directory`` whose name starts with ``prefix``
    (the artifact or its temporary file); 0 if there is none yet."""
    sizes = [0]
    with contextlib.suppress(OSError):
        for entry in directory.iterdir():
            if entry.name.startswith(prefix):
                with contextlib.suppress(OSError):
                    sizes.append(entry.stat().st_size)
    return max(sizes)


@contextlib.contextmanager
def watch_download(
    directory: Path,
    prefix: str,
    *,
    total: int | None,
    label: str,
    report: Callable[[int], None] | None = None,
    interval_s: float = 0.5,
) -> Iterator[None]:
    """Report the growth of ``directory/prefix*`` while the block runs.

    ``report(bytes_so_far)`` is called on each change (default: a tqdm bar on
    stderr, redrawn at most every 5 s when stderr is not a terminal).
    """
    bar: tqdm[Any] | None = None
    if report is None:
        bar = tqdm(
            total=total,
            desc=label,
            unit="B",
            unit_scale=True,
            file=sys.stderr,
            mininterval=0.5 if sys.stderr.isatty() else 5.0,
        )

        def to_bar(size: int) -> None:
            assert bar is not None
            bar.update(max(0, size - bar.n))

        report = to_bar
    stop = threading.Event()
    seen = 0

    def poll() -> None:
        nonlocal seen
        while not stop.wait(interval_s):
            size = largest_file_size(directory, prefix)
            if size != seen:
                seen = size
                report(size)

    thread = threading.Thread(target=poll, name="pss-download-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(interval_s + 1)
        size = largest_file_size(directory, prefix)
        if size != seen:
            report(size)
        if bar is not None:
            bar.close()
