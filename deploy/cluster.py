"""A real multi-broker Pulsar cluster on this machine: :class:`LocalCluster`.

From the same cached distribution as the standalone (:mod:`.standalone`): one
ZooKeeper, the cluster's metadata (``bin/pulsar initialize-cluster-metadata``,
which formats BookKeeper's too), 1-3 bookies and 1-5 brokers, every process
on loopback ports of its own, with a small G1 heap, in its own process group.
A data directory holds everything of one cluster::

    <data_dir>/
      conf/zookeeper.conf, bookie-<i>.conf, broker-<i>.conf,
           functions-worker-<i>.yml                  rendered at each start
      data/zookeeper, data/bookie-<i>/               the metadata and the ledgers
      logs/<process>.log                             each process's output
      auth/secret.key, auth/<role>.token             with auth="token"
      tls/ca.pem, broker.pem, client-<role>.pem, ... with tls=True (see .cluster_tls)
      layout.json                                    shape and ports, kept for the dir's life
      cluster.json                                   pids and URLs while running

The brokers start one after the other, each once the previous one answers its
health check: started together on a fresh cluster, one of them exits with
"Failed to fence subscription". With ``tls`` each broker also serves TLS on
two more ports (the launcher's readiness checks and the brokers' own traffic
stay on the plain ones). Every process's pid is in ``cluster.json``, so
``status``, ``stop``, ``kill_broker``/``start_broker``/``restart_broker`` and
``kill_bookie``/``start_bookie`` work from another process; ``stop`` ends the
brokers' process groups (their function instances included), then the
bookies', then ZooKeeper's.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pulsar_state.deploy.cluster_config import ClusterConfig, ClusterPorts, stored_layout
from pulsar_state.deploy.cluster_credentials import SUPERUSER, ClusterCredentials
from pulsar_state.deploy.cluster_info import ClusterInfo
from pulsar_state.deploy.cluster_launch import MAIN_CLASS, ClusterFiles, process_kind
from pulsar_state.deploy.cluster_ready import ClusterProbe
from pulsar_state.deploy.distribution import PulsarDistribution, java_executable
from pulsar_state.deploy.errors import BrokerNotRunningError, BrokerStartError
from pulsar_state.deploy.processes import (
    process_runs,
    signal_group,
    tail_lines,
    terminate_groups,
    wait_gone,
)
from pulsar_state.deploy.standalone_config import LOOPBACK
from pulsar_state.errors import ConfigurationError

__all__ = ["ClusterInfo", "LocalCluster"]

log = logging.getLogger(__name__)


class LocalCluster(ClusterCredentials):
    """ZooKeeper, bookies and brokers of one data directory (see the module's docstring).

    Args:
        data_dir: where the cluster keeps its data, config, logs and pids.
        distribution: the Pulsar distribution to run (default: the pinned version).
        brokers: brokers to run, 1..5.
        bookies: bookies to run, 1..3 (every ledger is written to all of them).
        auth: ``None``, or ``"token"``: JWT authentication and authorization,
            super-user ``admin`` (its token in ``auth/admin.token``).
        functions: run a functions worker inside each broker.
        tls: each broker also serves TLS (``pulsar+ssl://``, ``https://``) with a
            certificate of the cluster's own throwaway CA (``tls/ca.pem``); with
            ``auth="token"`` a client certificate of :meth:`client_certificate`
            authenticates too.
        python: the interpreter Python functions run with (default: this one).
        start_timeout_s: how long each step of a start may take to be ready.
        broker_settings: extra ``broker.conf`` settings of every broker.
        **config: the other fields of :class:`ClusterConfig` (heaps, GC, name).

    Raises:
        ConfigurationError: a value out of range (brokers 0, auth "basic", ...).
        TypeError: a value of the wrong type.
    """

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike[str],
        distribution: PulsarDistribution | None = None,
        brokers: int = 2,
        bookies: int = 1,
        auth: str | None = None,
        functions: bool = False,
        tls: bool = False,
        python: str | None = None,
        start_timeout_s: float = 240.0,
        broker_settings: dict[str, str] | None = None,
        **config: Any,
    ) -> None:
        self.config = ClusterConfig(
            brokers=brokers,
            bookies=bookies,
            auth=auth,
            functions=functions,
            tls=tls,
            start_timeout_s=start_timeout_s,
            broker_settings=dict(broker_settings or {}),
            **config,
        )
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.distribution = distribution or PulsarDistribution()
        self.python = python or sys.executable
        self._files = ClusterFiles(
            data_dir=self.data_dir,
            distribution=self.distribution,
            config=self.config,
            python=self.python,
        )
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # -- paths ------------------------------------------------------------------------

    def log_file(self, process: str) -> Path:
        """The log of ``process`` (``zookeeper``, ``bookie-<i>``, ``broker-<i>``)."""
        return self._files.log_file(process)

    def log_tail(self, process: str = "broker-0", lines: int = 40) -> str:
        """The last ``lines`` lines of the log of ``process``."""
        return tail_lines(self.log_file(process), lines)

    @property
    def _state_file(self) -> Path:
        return self.data_dir / "cluster.json"

    @property
    def _layout_file(self) -> Path:
        return self.data_dir / "layout.json"

    # -- layout and state ----------------------------------------------------------------

    def _stored_layout(self) -> dict[str, Any] | None:
        return _json_file(self._layout_file)

    def _ports(self) -> ClusterPorts:
        """The ports of this data directory: picked once, kept while the layout holds."""
        stored = self._stored_layout()
        layout = self.config.layout()
        if stored is not None:
            if stored_layout(stored.get("layout")) == layout:
                ports = ClusterPorts.from_json(json.dumps(stored["ports"]))
                if ports.tls == self.config.tls:
                    return ports
            if (self.data_dir / "data").exists():
                raise ConfigurationError(
                    f"{self.data_dir} holds a cluster of {stored.get('layout')}, not {layout}: "
                    "start it fresh (--fresh) or use another data directory"
                )
        ports = ClusterPorts.pick(
            brokers=self.config.brokers, bookies=self.config.bookies, tls=self.config.tls
        )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        record = {"layout": layout, "ports": json.loads(ports.to_json())}
        self._layout_file.write_text(json.dumps(record, indent=2))
        return ports

    def _running_ports(self) -> ClusterPorts:
        stored = self._stored_layout()
        if stored is None:
            raise BrokerNotRunningError(f"no cluster on {self.data_dir}")
        return ClusterPorts.from_json(json.dumps(stored["ports"]))

    def _read_state(self) -> dict[str, Any] | None:
        return _json_file(self._state_file)

    def _write_state(self, info: ClusterInfo, pids: dict[str, int | None]) -> None:
        tmp = self._state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"info": asdict(info), "pids": pids}, indent=2))
        tmp.replace(self._state_file)

    def _set_pid(self, process: str, pid: int | None) -> None:
        state = self._read_state()
        if state is None:
            raise BrokerNotRunningError(f"no cluster started by pulsar-state on {self.data_dir}")
        state["pids"][process] = pid
        self._write_state(ClusterInfo.from_dict(state["info"]), state["pids"])

    def _alive(self, process: str, pid: int | None) -> bool:
        if pid is None:
            return False
        proc = self._procs.get(process)
        if proc is not None and proc.pid == pid:
            # our child: its command line is bin/pulsar's until it execs java
            return proc.poll() is None
        return process_runs(
            pid, (MAIN_CLASS[process_kind(process)], str(self._files.conf(process)))
        )

    # -- status ---------------------------------------------------------------------------

    def status(self) -> ClusterInfo | None:
        """The running cluster of this data directory (its ZooKeeper runs), or ``None``.

        A cluster with a killed broker or bookie still runs: see :meth:`processes`.
        """
        state = self._read_state()
        if state is None or not self._alive("zookeeper", state["pids"].get("zookeeper")):
            return None
        return ClusterInfo.from_dict(state["info"])

    def processes(self) -> dict[str, int | None]:
        """Each process of the cluster and its pid, ``None`` for one not running."""
        state = self._read_state()
        if state is None:
            return {}
        return {
            name: pid if self._alive(name, pid) else None for name, pid in state["pids"].items()
        }

    def broker_pid(self, index: int) -> int | None:
        """The pid of broker ``index`` while it runs, else ``None``."""
        return self.processes().get(f"broker-{index}")

    def require_running(self) -> ClusterInfo:
        """The running cluster.

        Raises:
            BrokerNotRunningError: none runs on this data directory.
        """
        info = self.status()
        if info is None:
            raise BrokerNotRunningError(f"no cluster started by pulsar-state on {self.data_dir}")
        return info

    def probe(self) -> ClusterProbe:
        """Readiness questions to this cluster (with the super-user token under auth)."""
        state = self._read_state()
        token = state["info"]["superuser_token"] if state else None
        name = state["info"]["cluster_name"] if state else self.config.cluster_name
        return ClusterProbe(cluster_name=name, token=token)

    def is_ready(self) -> bool:
        """Every process runs, every broker is healthy, listed and (TLS) accepts TLS
        connections, public/default exists."""
        procs = self.processes()
        if not procs or not all(procs.values()):
            return False
        ports = self._running_ports()
        probe = self.probe()
        urls = [b.admin_url for b in ports.brokers]
        tls_ports = [p for b in ports.brokers for p in (b.service_tls, b.web_tls) if p is not None]
        return (
            all(probe.broker_healthy(url) for url in urls)
            and all(probe.port_open(port) for port in tls_ports)
            and probe.brokers_listed(urls[0], [b.web for b in ports.brokers])
            and probe.ensure_default_namespace(urls[0])
        )

    # -- start ----------------------------------------------------------------------------

    def start(self, *, fresh: bool = False) -> ClusterInfo:
        """Start the cluster (or return the running one) and wait until it is ready.

        On a running cluster, processes that are down (a killed broker) are
        started again. ``fresh`` wipes the data, logs and token secret first;
        refused while the cluster runs. A TLS cluster's CA and certificates
        (``tls/``) are made on the first start and kept, fresh or not.

        Raises:
            BrokerStartError: a process exited or a step was not ready in time
                (every process started is stopped again).
            PortInUseError: one of the cluster's ports is taken.
            ConfigurationError: the data directory holds a cluster of another
                shape (brokers, bookies, auth, tls) and ``fresh`` is not set.
            BrokerSetupError: no Java 17+, the distribution cannot be obtained,
                or (tls) ``cryptography`` is not installed.
        """
        running = self.status()
        if running is not None:
            if fresh:
                raise BrokerStartError(
                    f"a cluster runs on {self.data_dir}; stop it before starting fresh"
                )
            stored = stored_layout((self._stored_layout() or {}).get("layout"))
            if stored != self.config.layout():
                log.warning("reusing the running cluster on %s (%s)", self.data_dir, stored)
            for process, pid in self.processes().items():
                if pid is None and process.startswith("bookie-"):
                    self._launch(process)
                    self._wait_bookie(int(process.split("-")[1]), self._running_ports())
            for process, pid in self.processes().items():
                if pid is None and process.startswith("broker-"):
                    self.start_broker(int(process.split("-")[1]))
            self._wait_cluster(self._running_ports())
            return running
        self.stop()  # the processes of a cluster whose ZooKeeper is gone
        java_executable()  # Java 17+ or a clear error before anything else
        self.distribution.ensure()
        if fresh:
            for sub in ("data", "download", "auth", "logs"):
                shutil.rmtree(self.data_dir / sub, ignore_errors=True)
            self._layout_file.unlink(missing_ok=True)
        ports = self._ports()
        ports.check_free()
        authority = self._authority(create=True) if self.config.auth == "token" else None
        tls = self.tls_files.ensure() if self.config.tls else None
        self._files.render(ports, authority, tls)
        info = ClusterInfo(
            cluster_name=self.config.cluster_name,
            service_urls=tuple(b.service_url for b in ports.brokers),
            admin_urls=tuple(b.admin_url for b in ports.brokers),
            superuser_token=authority.superuser_token if authority else None,
            token_file=str(self.token_path(SUPERUSER)) if authority else None,
            data_dir=str(self.data_dir),
            version=self.distribution.version,
            functions=self.config.functions,
            started_at=time.time(),
            tls_service_urls=tuple(b.tls_service_url or "" for b in ports.brokers if tls),
            tls_admin_urls=tuple(b.tls_admin_url or "" for b in ports.brokers if tls),
            ca_file=str(tls.ca_file) if tls else None,
        )
        self._write_state(info, {})
        began = time.monotonic()
        try:
            self._launch("zookeeper")
            probe = self.probe()
            self._wait(
                "ZooKeeper answers", lambda: probe.zookeeper_ok(ports.zookeeper), ["zookeeper"]
            )
            self._files.initialize_metadata(ports)
            for i in range(self.config.bookies):
                self._launch(f"bookie-{i}")
            for i in range(self.config.bookies):
                self._wait_bookie(i, ports)
            # one after the other: started together, one broker exits with
            # "Failed to fence subscription" on a fresh cluster
            for i in range(self.config.brokers):
                self._launch(f"broker-{i}")
                self._wait_broker(i, ports)
            self._wait_cluster(ports)
        except BaseException:
            self.stop(timeout_s=15)
            raise
        log.info("cluster ready in %.1fs", time.monotonic() - began)
        return info

    def _launch(self, process: str) -> None:
        proc = self._files.launch(process, functions=self._state_functions())
        self._procs[process] = proc
        self._set_pid(process, proc.pid)

    def _state_functions(self) -> bool:
        state = self._read_state()
        return bool(state and state["info"]["functions"])

    # -- waiting --------------------------------------------------------------------------

    def _wait(self, what: str, ready: Callable[[], bool], watch: Sequence[str]) -> None:
        """Poll ``ready`` until it holds; fail at once when a ``watch`` process exits."""
        deadline = time.monotonic() + self.config.start_timeout_s
        pids = self.processes()
        while True:
            for process in watch:
                if not self._alive(process, pids.get(process)):
                    tail = self.log_tail(process)
                    cause = " (address in use)" if "Address already in use" in tail else ""
                    raise BrokerStartError(
                        f"{process} exited before {what}{cause} (log: {self.log_file(process)})",
                        log_tail=tail,
                    )
            if ready():
                return
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"not ready after {self.config.start_timeout_s:.0f}s: {what} "
                    f"(log: {self.log_file(watch[-1])})",
                    log_tail=self.log_tail(watch[-1]),
                )
            time.sleep(0.5)

    def _wait_bookie(self, index: int, ports: ClusterPorts) -> None:
        probe = self.probe()
        port = ports.bookies[index].bookie
        self._wait(
            f"bookie-{index} accepts connections",
            lambda: probe.port_open(port),
            [f"bookie-{index}"],
        )

    def _wait_broker(self, index: int, ports: ClusterPorts) -> None:
        probe = self.probe()
        own = ports.brokers[index]
        watch = ["zookeeper", f"broker-{index}"]
        self._wait(
            f"broker-{index} passes its health check",
            lambda: probe.broker_healthy(own.admin_url),
            watch,
        )
        for port in (own.service_tls, own.web_tls):
            if port is not None:
                self._wait(
                    f"broker-{index} accepts TLS connections on {port}",
                    functools.partial(probe.port_open, port),
                    watch,
                )

    def _wait_cluster(self, ports: ClusterPorts) -> None:
        """Every running broker listed, public/default there, the workers up."""
        probe = self.probe()
        procs = self.processes()
        up = [i for i in range(len(ports.brokers)) if procs.get(f"broker-{i}")]
        urls = [ports.brokers[i].admin_url for i in up]
        webs = [ports.brokers[i].web for i in up]
        watch = ["zookeeper", *(f"broker-{i}" for i in up)]
        self._wait("every broker is listed", lambda: probe.brokers_listed(urls[0], webs), watch)
        self._wait("public/default exists", lambda: probe.ensure_default_namespace(urls[0]), watch)
        if self._state_functions():
            for url in urls:
                ready = functools.partial(probe.worker_ready, url, len(up))
                self._wait(f"the functions worker at {url} answers", ready, watch)

    # -- faults ---------------------------------------------------------------------------

    def _index(self, kind: str, index: int) -> int:
        ports = self._running_ports()
        count = len(ports.brokers if kind == "broker" else ports.bookies)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise ConfigurationError(f"{kind} index must be 0..{count - 1}, got {index!r}")
        return index

    def _kill(self, kind: str, index: int) -> None:
        self.require_running()
        self._index(kind, index)
        process = f"{kind}-{index}"
        pid = self.processes().get(process)
        if pid is None:
            raise BrokerNotRunningError(f"{process} of {self.data_dir} does not run")
        signal_group(pid, signal.SIGKILL)
        wait_gone(pid, 30)
        self._set_pid(process, None)

    def kill_broker(self, index: int) -> None:
        """SIGKILL broker ``index`` and its process group: a crash, not a shutdown.

        Its topics move to another broker once its ZooKeeper session expires
        (``metadataStoreSessionTimeoutMillis``, 30 s by default).

        Raises:
            ConfigurationError: no broker ``index``.
            BrokerNotRunningError: the cluster or that broker does not run.
        """
        self._kill("broker", index)

    def kill_bookie(self, index: int) -> None:
        """SIGKILL bookie ``index``: a crash. A ledger whose ensemble held it goes on
        with another bookie when enough remain (``managedLedgerDefaultEnsembleSize``,
        or a namespace's persistence policy, below the number of bookies).

        Raises:
            ConfigurationError: no bookie ``index``.
            BrokerNotRunningError: the cluster or that bookie does not run.
        """
        self._kill("bookie", index)

    def bookie_id(self, index: int) -> str:
        """Bookie ``index`` as BookKeeper names it in a ledger's ensemble (``host:port``).

        Raises:
            ConfigurationError: no bookie ``index``.
            BrokerNotRunningError: no cluster on this data directory.
        """
        return f"{LOOPBACK}:{self._running_ports().bookies[self._index('bookie', index)].bookie}"

    def start_bookie(self, index: int) -> ClusterInfo:
        """Start bookie ``index`` again (after :meth:`kill_bookie`) and wait until it
        accepts connections; a running bookie is left alone.

        Raises:
            ConfigurationError: no bookie ``index``.
            BrokerNotRunningError: the cluster does not run.
            BrokerStartError: the bookie exited or was not ready in time.
        """
        info = self.require_running()
        self._index("bookie", index)
        if self.processes().get(f"bookie-{index}") is not None:
            return info
        self._launch(f"bookie-{index}")
        try:
            self._wait_bookie(index, self._running_ports())
        except BaseException:
            self._stop_processes([f"bookie-{index}"], timeout_s=15)
            raise
        return info

    def start_broker(self, index: int) -> ClusterInfo:
        """Start broker ``index`` again (after :meth:`kill_broker`) and wait until it
        is healthy and listed; a running broker is left alone.

        Raises:
            ConfigurationError: no broker ``index``.
            BrokerNotRunningError: the cluster does not run.
            BrokerStartError: the broker exited or was not ready in time.
        """
        info = self.require_running()
        self._index("broker", index)
        if self.broker_pid(index) is not None:
            return info
        ports = self._running_ports()
        self._launch(f"broker-{index}")
        try:
            self._wait_broker(index, ports)
            self._wait_cluster(ports)
        except BaseException:
            self._stop_processes([f"broker-{index}"], timeout_s=15)
            raise
        return info

    def restart_broker(self, index: int, *, timeout_s: float = 120.0) -> ClusterInfo:
        """Stop broker ``index`` cleanly (SIGTERM: it hands its topics over as it
        shuts down; SIGKILL only past ``timeout_s``), start it again and wait until
        it is healthy and listed: one step of a rolling restart. A broker that is
        down is only started.

        Raises:
            ConfigurationError: no broker ``index``.
            BrokerNotRunningError: the cluster does not run.
            BrokerStartError: the broker exited or was not ready in time.
        """
        self.require_running()
        self._index("broker", index)
        self._stop_processes([f"broker-{index}"], timeout_s)
        return self.start_broker(index)

    # -- stop -----------------------------------------------------------------------------

    def stop(self, *, timeout_s: float = 60.0) -> bool:
        """Stop every process of this data directory's cluster: brokers, then
        bookies, then ZooKeeper; ``False`` if none was running."""
        state = self._read_state()
        if state is None:
            return False
        names = list(state["pids"])
        stopped = False
        for kind in ("broker", "bookie", "zookeeper"):
            stopped |= self._stop_processes([n for n in names if n.startswith(kind)], timeout_s)
        self._state_file.unlink(missing_ok=True)
        self._procs.clear()
        return stopped

    def _stop_processes(self, names: list[str], timeout_s: float) -> bool:
        pids = self.processes()
        alive = [pid for name in names if (pid := pids.get(name)) is not None]
        terminate_groups(alive, timeout_s=timeout_s, what=", ".join(names))
        if self._state_file.is_file():
            for name in names:
                self._set_pid(name, None)
        return bool(alive)


def _json_file(path: Path) -> dict[str, Any] | None:
    """The JSON object stored in ``path`` (``None``: no file, or not JSON)."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data
