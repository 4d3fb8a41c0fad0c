"""The launchers' local processes: one process group each, found again by pid.

The standalone (:mod:`.standalone`) and the local cluster (:mod:`.cluster`)
start every JVM with ``start_new_session=True``, so its process group id is
its pid and everything it forks (function instances) shares that group. A
launcher writes the pids to a file in its data directory; another process (the
next ``pulsar-state`` command) finds them again there and checks, before it
signals anything, that the pid still runs what the launcher started (its
command line names the main class and a path of the data directory).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "launch",
    "process_runs",
    "signal_group",
    "tail_lines",
    "terminate_group",
    "terminate_groups",
    "wait_gone",
]

log = logging.getLogger(__name__)


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``pid`` leads; a gone group is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)  # start_new_session: pgid == pid


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Wait until ``pid`` exits (reaped when it is our child); ``False`` on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            reaped, _ = os.waitpid(pid, os.WNOHANG)
            if reaped == pid:
                return True
        except ChildProcessError:
            pass  # not our child (started by another process): poll its existence
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def terminate_group(pid: int, *, timeout_s: float, what: str = "process") -> None:
    """SIGTERM the group of ``pid``, SIGKILL it after ``timeout_s``, then SIGKILL
    whatever is left in the group (children that outlived their parent)."""
    signal_group(pid, signal.SIGTERM)
    if not wait_gone(pid, timeout_s):
        log.warning("%s pid %s ignored SIGTERM for %.0fs; killing", what, pid, timeout_s)
        signal_group(pid, signal.SIGKILL)
        wait_gone(pid, 30)
    signal_group(pid, signal.SIGKILL)


def process_runs(pid: int, markers: Iterable[str]) -> bool:
    """``pid`` is alive and its command line holds every one of ``markers``.

    Without ``/proc`` the pid's existence is trusted.
    """
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True  # no /proc: trust the pid file
    try:
        args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return all(marker in args for marker in markers)


def tail_lines(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file; ``""`` when it cannot be read."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def terminate_groups(pids: Iterable[int], *, timeout_s: float, what: str = "process") -> None:
    """:func:`terminate_group` of several groups at once: all get SIGTERM first,
    so that they shut down side by side."""
    pids = list(pids)
    for pid in pids:
        signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        terminate_group(pid, timeout_s=max(deadline - time.monotonic(), 0.5), what=what)


def launch(
    cmd: list[str], *, cwd: Path, env: dict[str, str], log_file: Path
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own process group (stopping the group ends everything
    it started), its output appended to ``log_file``."""
    with open(log_file, "ab") as out:
        return subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
