"""Stacks of a child process's threads, for a test that waits on it in vain.

A child calls :func:`stacks_on_sigusr1` first; when the parent gives up
waiting, :func:`dump_stacks` signals it and returns what each of its threads
was doing, for the failure message.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import time
from pathlib import Path


def stacks_on_sigusr1(log_dir: str) -> None:
    """Write this process's thread stacks to ``<log_dir>/stacks-<pid>.txt`` on ``SIGUSR1``."""
    out = open(Path(log_dir) / f"stacks-{os.getpid()}.txt", "w")  # noqa: SIM115 (kept open)
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True)


def dump_stacks(pid: int, log_dir: Path) -> str:
    """The stacks of process ``pid``'s threads (it writes them on SIGUSR1)."""
    path = log_dir / f"stacks-{pid}.txt"
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        return f"(process {pid} is gone)"
    time.sleep(0.5)
    return path.read_text() if path.exists() else f"(no stacks from {pid})"
