"""Start, stop and inspect an embedded Pulsar standalone on a data directory.

A data directory holds everything of one broker::

    <data_dir>/
      conf/standalone.conf, conf/functions_worker.yml   rendered at each start
      data/metadata, data/bookkeeper                     RocksDB metadata, the bookie
      logs/standalone.log                                broker output; logs/functions/...
      download/                                          function packages
      packages-storage/                                  the worker's stored function code
      ports.json                                         ports, kept for the dir's life
      broker.json                                        pid and URLs while running

The process runs in its own process group (the functions worker's Python
instances are its children), so :meth:`StandaloneBroker.stop` ends exactly
what :meth:`StandaloneBroker.start` began and nothing else. A second ``start``
on a running data directory returns the running broker.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import requests

from pulsar_state.deploy.distribution import PulsarDistribution, java_executable
from pulsar_state.deploy.errors import BrokerNotRunningError, BrokerStartError
from pulsar_state.deploy.processes import (
    launch,
    process_runs,
    signal_group,
    tail_lines,
    terminate_group,
    wait_gone,
)
from pulsar_state.deploy.standalone_config import (
    DEFAULT_PULSAR_MEM,
    StandalonePorts,
    render_functions_worker_yml,
    render_standalone_conf,
)
from pulsar_state.errors import ConfigurationError

__all__ = ["BrokerInfo", "StandaloneBroker"]

log = logging.getLogger(__name__)

_MAIN_CLASS = "org.apache.pulsar.PulsarStandaloneStarter"


@dataclass(frozen=True, kw_only=True)
class BrokerInfo:
    """What a running standalone is and where to reach it."""

    pid: int
    service_url: str
    admin_url: str
    data_dir: str
    version: str
    functions: bool
    started_at: float

    def describe(self) -> str:
        return f"service_url={self.service_url}\nadmin_url={self.admin_url}"


#: what a ready standalone answers: (admin path, what its 200 answer's JSON must
#: hold; None: anything)
_READY: tuple[tuple[str, Callable[[Any], bool] | None], ...] = (
    ("/admin/v2/clusters", lambda clusters: "standalone" in clusters),
    ("/admin/v2/namespaces/public", lambda namespaces: "public/default" in namespaces),
)
#: and, with the functions worker, what the worker answers
_WORKER_READY: tuple[tuple[str, Callable[[Any], bool] | None], ...] = (
    ("/admin/v2/worker/cluster", bool),
    ("/admin/v3/functions/public/default", None),
)


class StandaloneBroker:
    """One Pulsar standalone process bound to one data directory.

    Args:
        data_dir: where the broker keeps its data, config, logs and pid file.
        distribution: the Pulsar distribution to run (default: the pinned version).
        functions: run the functions worker (with the Python runtime).
        python: the interpreter Python functions run with (default: this one).
        pulsar_mem: JVM memory flags (``PULSAR_MEM``).
        start_timeout_s: how long :meth:`start` waits for readiness.
        broker_settings: extra ``standalone.conf`` settings (they win).
        admin_token: a token for the launcher's own admin calls (readiness), when
            the settings turn authentication on (see :class:`TokenAuthority`).
    """

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike[str],
        distribution: PulsarDistribution | None = None,
        functions: bool = True,
        python: str | None = None,
        pulsar_mem: str = DEFAULT_PULSAR_MEM,
        start_timeout_s: float = 240.0,
        broker_settings: dict[str, str] | None = None,
        admin_token: str | None = None,
    ) -> None:
        if not isinstance(functions, bool):
            raise TypeError(f"functions must be a bool, got {functions!r}")
        if start_timeout_s <= 0:
            raise ConfigurationError(f"start_timeout_s must be > 0, got {start_timeout_s!r}")
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.distribution = distribution or PulsarDistribution()
        self.functions = functions
        self.python = python or sys.executable
        self.pulsar_mem = pulsar_mem
        self.start_timeout_s = start_timeout_s
        # this broker's function packages in its own data dir: Pulsar's standalone
        # stores them under a relative "packages-storage", i.e. in the shared
        # distribution, where deleting a function on one broker deleted the code
        # of the same-named function on every other broker of the machine
        self.broker_settings = {
            "STORAGE_PATH": str(self.data_dir / "packages-storage"),
            **dict(broker_settings or {}),
        }
        self._admin_headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}

    # -- paths ----------------------------------------------------------------

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / "standalone.log"

    @property
    def _state_file(self) -> Path:
        return self.data_dir / "broker.json"

    @property
    def _ports_file(self) -> Path:
        return self.data_dir / "ports.json"

    def log_tail(self, lines: int = 40) -> str:
        return tail_lines(self.log_file, lines)

    # -- status ---------------------------------------------------------------

    def status(self) -> BrokerInfo | None:
        """The running broker of this data directory, or ``None``."""
        try:
            info = BrokerInfo(**json.loads(self._state_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None
        if not self._is_our_process(info.pid):
            return None
        return info

    def _is_our_process(self, pid: int) -> bool:
        return process_runs(pid, (_MAIN_CLASS, str(self.data_dir)))

    def is_ready(self, info: BrokerInfo, *, timeout_s: float = 2.0) -> bool:
        """Broker answers admin calls (and the worker does, when enabled): each of
        :data:`_READY` (and :data:`_WORKER_READY`) answers 200 with what it must hold.

        Returns:
            ``True`` once every answer is as a ready standalone gives it.
        """
        checks = _READY + (_WORKER_READY if info.functions else ())
        try:
            for path, holds in checks:
                answer = requests.get(
                    f"{info.admin_url}{path}", timeout=timeout_s, headers=self._admin_headers
                )
                if answer.status_code != 200 or (holds is not None and not holds(answer.json())):
                    return False
        except (requests.RequestException, ValueError):
            return False
        return True

    # -- start ----------------------------------------------------------------

    def start(self, *, fresh: bool = False) -> BrokerInfo:
        """Start the standalone (or return the one already running) and wait until ready.

        Args:
            fresh: wipe the broker's data (not the config) before starting; refused
                while it runs.
        """
        running = self.status()
        if running is not None:
            if fresh:
                raise BrokerStartError(
                    f"a broker (pid {running.pid}) runs on {self.data_dir}; stop it before "
                    "starting fresh"
                )
            if running.functions != self.functions:
                log.warning(
                    "reusing the running broker on %s (functions worker %s)",
                    self.data_dir,
                    "on" if running.functions else "off",
                )
            self._wait_ready(running, proc=None)
            return running

        java = java_executable()
        self.distribution.ensure()
        if fresh:
            shutil.rmtree(self.data_dir / "data", ignore_errors=True)
            shutil.rmtree(self.data_dir / "download", ignore_errors=True)
            shutil.rmtree(self.data_dir / "packages-storage", ignore_errors=True)
        ports = self._ports()
        ports.check_free()
        conf_dir = self.data_dir / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        standalone_conf = conf_dir / "standalone.conf"
        worker_yml = conf_dir / "functions_worker.yml"
        standalone_conf.write_text(
            render_standalone_conf(self.distribution, ports, self.broker_settings)
        )
        worker_yml.write_text(render_functions_worker_yml(self.distribution, ports, self.data_dir))

        cmd = [
            str(self.distribution.pulsar_bin),
            "standalone",
            "--no-stream-storage",
            "--metadata-dir",
            str(self.data_dir / "data" / "metadata"),
            "--bookkeeper-dir",
            str(self.data_dir / "data" / "bookkeeper"),
            "--functions-worker-conf",
            str(worker_yml),
        ]
        if not self.functions:
            cmd.append("--no-functions-worker")
        env = dict(os.environ)
        python_bin = str(Path(self.python).parent)
        env.update(
            {
                # the worker's process runtime execs `python3` from PATH
                "PATH": python_bin + os.pathsep + env.get("PATH", ""),
                "JAVA_HOME": str(Path(java).resolve().parent.parent),
                "PULSAR_MEM": self.pulsar_mem,
                "PULSAR_LOG_DIR": str(self.data_dir / "logs"),
                "PULSAR_STANDALONE_CONF": str(standalone_conf),
            }
        )
        env.pop("VIRTUAL_ENV", None)
        log.info("starting Pulsar %s standalone on %s", self.distribution.version, self.data_dir)
        proc = launch(cmd, cwd=self.data_dir, env=env, log_file=self.log_file)
        info = BrokerInfo(
            pid=proc.pid,
            service_url=ports.service_url,
            admin_url=ports.admin_url,
            data_dir=str(self.data_dir),
            version=self.distribution.version,
            functions=self.functions,
            started_at=time.time(),
        )
        self._state_file.write_text(json.dumps(asdict(info), indent=2))
        try:
            self._wait_ready(info, proc=proc)
        except BaseException:
            self._terminate(proc.pid, timeout_s=15)
            self._state_file.unlink(missing_ok=True)
            raise
        log.info("standalone ready in %.1fs", time.time() - info.started_at)
        return info

    def _ports(self) -> StandalonePorts:
        if self._ports_file.is_file():
            return StandalonePorts.from_json(self._ports_file.read_text())
        ports = StandalonePorts.pick()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._ports_file.write_text(ports.to_json())
        return ports

    def _wait_ready(self, info: BrokerInfo, proc: subprocess.Popen[bytes] | None) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if proc is not None and proc.poll() is not None:
                tail = self.log_tail()
                if "Address already in use" in tail:
                    raise BrokerStartError(
                        "the standalone could not bind one of its ports (address in use)",
                        log_tail=tail,
                    )
                raise BrokerStartError(
                    f"the standalone exited with code {proc.returncode} before it was ready "
                    f"(log: {self.log_file})",
                    log_tail=tail,
                )
            if self.is_ready(info):
                return
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"the standalone was not ready after {self.start_timeout_s:.0f}s "
                    f"(log: {self.log_file})",
                    log_tail=self.log_tail(),
                )
            time.sleep(0.5)

    # -- stop -----------------------------------------------------------------

    def stop(self, *, timeout_s: float = 60.0) -> bool:
        """Stop the broker of this data directory; ``False`` if none was running."""
        info = self.status()
        if info is None:
            self._state_file.unlink(missing_ok=True)
            return False
        self._terminate(info.pid, timeout_s=timeout_s)
        self._state_file.unlink(missing_ok=True)
        return True

    def require_running(self) -> BrokerInfo:
        info = self.status()
        if info is None:
            raise BrokerNotRunningError(f"no standalone started by pulsar-state on {self.data_dir}")
        return info

    def restart(self, *, stop_timeout_s: float = 60.0) -> BrokerInfo:
        """Stop (SIGKILL after ``stop_timeout_s``) and start again on the same ports
        and data (for fault tests)."""
        self.stop(timeout_s=stop_timeout_s)
        return self.start()

    def kill(self) -> None:
        """SIGKILL the whole process group: a crash, not a shutdown (fault tests)."""
        info = self.require_running()
        signal_group(info.pid, signal.SIGKILL)
        wait_gone(info.pid, 30)
        self._state_file.unlink(missing_ok=True)

    @staticmethod
    def _terminate(pid: int, *, timeout_s: float) -> None:
        # function instances the worker left behind share the process group
        terminate_group(pid, timeout_s=timeout_s, what="standalone")
