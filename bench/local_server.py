"""A peer server (etcd, ZooKeeper) run from Debian's packages on loopback, for benchmarks.

:class:`LocalServer` installs the package with apt-get when its binary is
missing (as root, idempotent), starts the server in its own process group with
a private data directory under the git-ignored ``.cache/bench/``, waits until
its client port answers, and stops exactly the process group it started.
A server that cannot be installed or started raises :class:`BenchSetupError`
with what went wrong and what to do.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "bench"
APT = ["apt-get", "-o", "DPkg::Lock::Timeout=600"]


class BenchSetupError(RuntimeError):
    """The bench cannot run here as configured; the message says why and what to do."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def ensure_package(package: str, probe: str) -> None:
    """Install the Debian ``package`` unless ``probe`` (a path or a command) exists."""
    if Path(probe).exists() or shutil.which(probe):
        return
    if os.geteuid() != 0:
        raise BenchSetupError(
            f"{probe} is missing: install the Debian package {package} "
            f"(sudo apt-get install {package}; installing it needs root), or leave this "
            "peer out with --systems"
        )
    if shutil.which(APT[0]) is None:
        raise BenchSetupError(
            f"{probe} is missing and there is no apt-get to install {package}: install "
            "it by hand, or leave this peer out with --systems"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"installing the Debian package {package}", flush=True)
    for step in ([*APT, "update", "-q"], [*APT, "install", "-y", "-q", package]):
        try:
            subprocess.run(step, check=True, env=env, capture_output=True, timeout=1200)
        except subprocess.CalledProcessError as exc:
            tail = (exc.stderr or b"").decode(errors="replace").strip()[-600:]
            raise BenchSetupError(
                f"{' '.join(step)} failed (exit {exc.returncode}): {tail}; install "
                f"{package} by hand, or leave this peer out with --systems"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise BenchSetupError(f"{' '.join(step)} took over 1200 s") from exc
    if not (Path(probe).exists() or shutil.which(probe)):
        raise BenchSetupError(f"installed {package} but {probe} is still missing")


class LocalServer:
    """One server process on 127.0.0.1:``port``; subclasses give the command line."""

    name = "server"

    def __init__(self) -> None:
        self.port = free_port()
        self.data_dir = CACHE / self.name
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def prepare(self) -> None:
        """Install and write configuration; called before :meth:`command`."""

    @property
    def pid_file(self) -> Path:
        return CACHE / f"{self.name}.pid"

    def _stop_leftover(self) -> None:
        """A server a crashed run left behind (its process group) is stopped first."""
        try:
            pid = int(self.pid_file.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return
        if str(self.data_dir).encode() in cmdline or str(CACHE).encode() in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)

    def start(self, timeout_s: float = 60.0) -> LocalServer:
        self.prepare()
        CACHE.mkdir(parents=True, exist_ok=True)
        self._stop_leftover()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir.mkdir(parents=True)
        self.prepare_data()
        self._log = (self.data_dir.parent / f"{self.name}.log").open("wb")
        self._process = subprocess.Popen(
            self.command(),
            cwd=self.data_dir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid_file.write_text(str(self._process.pid))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._log.flush()
                tail = Path(self._log.name).read_text(errors="replace").strip()[-600:]
                raise BenchSetupError(
                    f"{self.name} exited at start (code {self._process.returncode}); "
                    f"{self._log.name} ends with: {tail}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                if self.ready():
                    return self
            time.sleep(0.2)
        self.stop()
        raise BenchSetupError(
            f"{self.name} did not answer on port {self.port} in {timeout_s}s; see "
            f"{self.data_dir.parent / (self.name + '.log')}"
        )

    def prepare_data(self) -> None:
        """Files the server needs in its fresh data directory."""

    def ready(self) -> bool:
        return True

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
        if self._log is not None:
            self._log.close()
        self.pid_file.unlink(missing_ok=True)

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
