"""The files and processes of one local cluster's data directory.

:class:`ClusterFiles` renders each process's copy of the distribution's config
(``conf/<process>.conf``, see :mod:`.cluster_config`), runs
``initialize-cluster-metadata`` once per data directory, and starts a process
(``zookeeper``, ``bookie-<i>``, ``broker-<i>``) with ``bin/pulsar``: its config
through ``PULSAR_ZK_CONF`` / ``PULSAR_BOOKKEEPER_CONF`` / ``PULSAR_BROKER_CONF``,
its heap through ``PULSAR_MEM`` (``BOOKIE_MEM``), G1 through ``PULSAR_GC``
(``BOOKIE_GC``), its output in ``logs/<process>.log``, in a process group of its
own. Which processes run is :class:`~pulsar_state.deploy.cluster.LocalCluster`'s
business.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import yaml

from pulsar_state.deploy.cluster_config import (
    TOOL_MEM,
    ClusterConfig,
    ClusterPorts,
    bookie_settings,
    broker_settings,
    functions_worker_config,
    merge_properties,
    render_functions_worker_yml,
    zookeeper_settings,
)
from pulsar_state.deploy.cluster_tls import ClusterTls
from pulsar_state.deploy.distribution import PulsarDistribution, java_executable
from pulsar_state.deploy.errors import BrokerStartError
from pulsar_state.deploy.processes import launch, tail_lines
from pulsar_state.deploy.token_auth import TokenAuthority

__all__ = ["MAIN_CLASS", "ClusterFiles", "process_kind"]

log = logging.getLogger(__name__)

#: the Java main class of each kind of process (how its pid is recognised)
MAIN_CLASS = {
    "zookeeper": "org.apache.zookeeper.server.quorum.QuorumPeerMain",
    "bookie": "org.apache.bookkeeper.server.Main",
    "broker": "org.apache.pulsar.PulsarBrokerStarter",
}
_CONF_ENV = {
    "zookeeper": "PULSAR_ZK_CONF",
    "bookie": "PULSAR_BOOKKEEPER_CONF",
    "broker": "PULSAR_BROKER_CONF",
}


def process_kind(process: str) -> str:
    """``zookeeper``, ``bookie`` or ``broker``: the kind of ``broker-1`` and its siblings."""
    return process.split("-", maxsplit=1)[0]


class ClusterFiles:
    """Config, logs and process starts of one cluster's data directory.

    Args:
        data_dir: the cluster's data directory (absolute).
        distribution: the Pulsar distribution whose ``bin/pulsar`` runs everything.
        config: the cluster's shape and heaps.
        python: the interpreter Python functions run with.
    """

    def __init__(
        self,
        *,
        data_dir: Path,
        distribution: PulsarDistribution,
        config: ClusterConfig,
        python: str,
    ) -> None:
        self.data_dir = data_dir
        self.distribution = distribution
        self.config = config
        self.python = python
        self._java_home: str | None = None

    def conf(self, process: str) -> Path:
        """The config file of ``process`` (``functions-worker-<i>``: a YAML file)."""
        suffix = "yml" if process.startswith("functions-worker") else "conf"
        return self.data_dir / "conf" / f"{process}.{suffix}"

    def log_file(self, process: str) -> Path:
        """The log (the output) of ``process``."""
        return self.data_dir / "logs" / f"{process}.log"

    def render(
        self,
        ports: ClusterPorts,
        authority: TokenAuthority | None,
        tls: ClusterTls | None = None,
    ) -> None:
        """Write every process's config file from the distribution's templates
        (``tls``: the certificates of a TLS cluster)."""
        (self.data_dir / "conf").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        templates = self.distribution.root / "conf"
        zk = zookeeper_settings(ports, self.data_dir)
        self.conf("zookeeper").write_text(
            merge_properties((templates / "zookeeper.conf").read_text(), zk)
        )
        bk_template = (templates / "bookkeeper.conf").read_text()
        for i in range(self.config.bookies):
            bk = bookie_settings(ports, i, self.data_dir, self.config.bookie_settings)
            self.conf(f"bookie-{i}").write_text(merge_properties(bk_template, bk))
        broker_template = (templates / "broker.conf").read_text()
        worker_template = yaml.safe_load((templates / "functions_worker.yml").read_text())
        for i in range(self.config.brokers):
            settings = broker_settings(self.config, ports, i, authority, tls)
            self.conf(f"broker-{i}").write_text(merge_properties(broker_template, settings))
            if self.config.functions:
                worker = functions_worker_config(
                    worker_template,
                    self.config,
                    ports,
                    i,
                    data_dir=self.data_dir,
                    python_instance=self.distribution.python_instance_main,
                    distribution_root=self.distribution.root,
                    authority=authority,
                )
                self.conf(f"functions-worker-{i}").write_text(render_functions_worker_yml(worker))

    def env(self, process: str, mem: str) -> dict[str, str]:
        """The environment ``bin/pulsar`` runs ``process`` with."""
        env = dict(os.environ)
        env.pop("VIRTUAL_ENV", None)
        logs = self.data_dir / "logs"
        gc_log = f"-Xlog:gc:file={logs}/{process}-gc.log:time,uptime:filecount=2,filesize=10M"
        if self._java_home is None:
            self._java_home = str(Path(java_executable()).resolve().parent.parent)
        env.update(
            {
                # the functions worker's process runtime execs `python3` from PATH
                "PATH": str(Path(self.python).parent) + os.pathsep + env.get("PATH", ""),
                "JAVA_HOME": self._java_home,
                "PULSAR_LOG_DIR": str(logs),
                "PULSAR_MEM": mem,
                "BOOKIE_MEM": mem,
                "PULSAR_GC": self.config.gc,
                "BOOKIE_GC": self.config.gc,
                "PULSAR_GC_LOG": gc_log,
                "BOOKIE_GC_LOG": gc_log,
            }
        )
        return env

    def launch(self, process: str, *, functions: bool) -> subprocess.Popen[bytes]:
        """Start ``process`` in a process group of its own; its output goes to its log."""
        kind = process_kind(process)
        mem = {
            "zookeeper": self.config.zookeeper_mem,
            "bookie": self.config.bookie_mem,
            "broker": self.config.broker_mem,
        }[kind]
        env = self.env(process, mem)
        env[_CONF_ENV[kind]] = str(self.conf(process))
        cmd = [str(self.distribution.pulsar_bin), kind]
        worker_yml = self.conf(process.replace("broker", "functions-worker"))
        if kind == "broker" and functions:
            cmd += ["--functions-worker-conf", str(worker_yml)]
        log.info("starting %s of the cluster on %s", process, self.data_dir)
        return launch(cmd, cwd=self.data_dir, env=env, log_file=self.log_file(process))

    def initialize_metadata(self, ports: ClusterPorts) -> None:
        """``bin/pulsar initialize-cluster-metadata`` once per data directory.

        Raises:
            BrokerStartError: it failed or did not finish in time.
        """
        marker = self.data_dir / "data" / ".initialized"
        if marker.is_file():
            return
        first = ports.brokers[0]
        cmd = [
            str(self.distribution.pulsar_bin),
            "initialize-cluster-metadata",
            "--cluster",
            self.config.cluster_name,
            "--metadata-store",
            ports.metadata_store_url,
            "--configuration-metadata-store",
            ports.metadata_store_url,
            "--web-service-url",
            first.admin_url,
            "--broker-service-url",
            first.service_url,
        ]
        if first.tls_admin_url and first.tls_service_url:
            cmd += [
                "--web-service-url-tls",
                first.tls_admin_url,
                "--broker-service-url-tls",
                first.tls_service_url,
            ]
        log_file = self.log_file("initialize-cluster-metadata")
        with open(log_file, "ab") as out:
            try:
                done = subprocess.run(
                    cmd,
                    env=self.env("initialize-cluster-metadata", TOOL_MEM),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=self.config.start_timeout_s,
                    check=False,
                )
            except subprocess.TimeoutExpired as exc:
                raise BrokerStartError(
                    "initialize-cluster-metadata did not finish in time",
                    log_tail=tail_lines(log_file),
                ) from exc
        if done.returncode != 0:
            raise BrokerStartError(
                f"initialize-cluster-metadata failed (exit {done.returncode}, log: {log_file})",
                log_tail=tail_lines(log_file),
            )
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("initialized\n")
