"""A Spark standalone cluster for tests, from the installed pyspark package.

:func:`spark_standalone` starts a master and workers with the package's own
launcher (``pyspark/bin/spark-class``, what ``sbin/start-master.sh`` and
``start-worker.sh`` run; the wheel ships no such ``sbin`` scripts), each in a
process group of its own, on loopback ports, with small memory: the daemons'
heaps 256 MiB, each worker offering 1 core and 512 MiB to executors. Executors
run in their own JVMs, launched by the workers; their Python workers run the
Python the driver names (its ``PYSPARK_PYTHON``: set it to ``python`` too, so
they import the package under test; the daemons get ``PYSPARK_PYTHON=python``).
It returns once every worker is registered with the master (its JSON status
page) and stops every group (executors included) when the block ends, even on
failure.

:func:`task_executors` names the executors that ran a job group's tasks, from
the driver's REST API (``spark.ui.enabled`` must be true).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
from harness import wait_until
from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass(frozen=True)
class SparkStandalone:
    """A running standalone cluster: ``master_url`` (``spark://127.0.0.1:PORT``)
    for ``SparkSession.builder.master``, ``web_url`` the master's web UI, and the
    number of ``workers``, each with ``worker_memory`` for executors."""

    master_url: str
    web_url: str
    workers: int
    worker_memory: str
    python: str

    def status(self) -> dict[str, Any]:
        """The master's status page (``/json/``): its workers and applications.

        Returns:
            The decoded JSON.
        """
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=10) as answer:
            status: dict[str, Any] = json.load(answer)
        return status

    def alive_workers(self) -> int:
        """How many workers the master has registered as alive.

        Returns:
            The count.
        """
        return sum(1 for worker in self.status()["workers"] if worker["state"] == "ALIVE")


def free_port() -> int:
    """A loopback TCP port nobody listens on now.

    Returns:
        The port.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _daemon_env(work_dir: Path, python: str) -> dict[str, str]:
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(work_dir / "logs"),
        "SPARK_DAEMON_MEMORY": "256m",
        # no REST submission server: it would take the fixed port 6066
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "PYSPARK_PYTHON": python,
    }
    env.pop("SPARK_CONF_DIR", None)
    return env


def _stop_group(process: subprocess.Popen[bytes], name: str) -> None:
    """SIGTERM the process's group (a worker's executors stay in it), then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            log.warning("spark %s (pid %d) did not stop on %s", name, process.pid, sig.name)
            continue
        # the leader is gone; what else was in its group (executors) goes too
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return


def _start(
    stack: ExitStack, name: str, args: list[str], env: dict[str, str], work_dir: Path
) -> subprocess.Popen[bytes]:
    out = stack.enter_context((work_dir / f"{name}.log").open("wb"))
    process = subprocess.Popen(
        [str(SPARK_CLASS), *args],
        env=env,
        cwd=work_dir,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stopped as a whole
    )
    stack.callback(_stop_group, process, name)
    return process


def _running(processes: dict[str, subprocess.Popen[bytes]], work_dir: Path) -> None:
    for name, process in processes.items():
        if process.poll() is not None:
            tail = (work_dir / f"{name}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"spark {name} exited with {process.returncode}:\n{tail}")


@contextmanager
def spark_standalone(
    work_dir: Path,
    *,
    workers: int = 2,
    worker_memory: str = "512m",
    python: str = sys.executable,
    start_timeout_s: float = 180.0,
) -> Iterator[SparkStandalone]:
    """A master and ``workers`` workers of 1 core each, started under ``work_dir``
    (logs, the workers' directories) and stopped when the block ends.

    Yields:
        The cluster, once every worker is registered with the master.

    Raises:
        RuntimeError: a daemon exited while starting (its log's tail says why).
        AssertionError: the workers were not registered within ``start_timeout_s``.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    env = _daemon_env(work_dir, python)
    port, web_port = free_port(), free_port()
    cluster = SparkStandalone(
        master_url=f"spark://127.0.0.1:{port}",
        web_url=f"http://127.0.0.1:{web_port}",
        workers=workers,
        worker_memory=worker_memory,
        python=python,
    )
    began = time.monotonic()
    with ExitStack() as stack:
        master = [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port)]
        master += ["--webui-port", str(web_port)]
        processes = {"master": _start(stack, "master", master, env, work_dir)}

        def master_alive() -> bool:
            _running(processes, work_dir)
            return cluster.status()["status"] == "ALIVE"

        wait_until(master_alive, timeout_s=start_timeout_s, interval_s=0.3, message="master up")
        for index in range(workers):
            name = f"worker-{index}"
            worker_dir = work_dir / name
            worker_dir.mkdir(exist_ok=True)
            worker = [WORKER_CLASS, "--host", "127.0.0.1", "--webui-port", "0", "--cores", "1"]
            worker += ["--memory", worker_memory, "--work-dir", str(worker_dir)]
            processes[name] = _start(stack, name, [*worker, cluster.master_url], env, work_dir)

        def registered() -> bool:
            _running(processes, work_dir)
            return cluster.alive_workers() == workers

        left = max(1.0, start_timeout_s - (time.monotonic() - began))
        wait_until(registered, timeout_s=left, interval_s=0.3, message=f"{workers} workers up")
        log.info("spark standalone ready in %.1fs: %s", time.monotonic() - began, cluster)
        yield cluster


def _rest(session: SparkSession, path: str) -> Any:
    base = session.sparkContext.uiWebUrl
    if base is None:
        raise RuntimeError("the driver's web UI is off: set spark.ui.enabled=true")
    url = f"{base}/api/v1/applications/{session.sparkContext.applicationId}/{path}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def executor_ids(session: SparkSession) -> set[str]:
    """The ids of the executors registered with the driver and active (not the driver).

    Returns:
        The ids.
    """
    return {
        executor["id"]
        for executor in _rest(session, "executors")
        if executor["id"] != "driver" and executor["isActive"]
    }


def task_executors(session: SparkSession, group: str, *, timeout_s: float = 30.0) -> list[str]:
    """The executor of each successful task of the jobs run under job group
    ``group`` (``SparkContext.setJobGroup``), once the driver's status store has
    recorded every stage of them as complete.

    Returns:
        One executor id per successful task, in task id order.
    """
    tracker = session.sparkContext.statusTracker()
    stage_ids: list[int] = []
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        assert job is not None, f"job {job_id} of {group} is unknown"
        stage_ids.extend(job.stageIds)
    assert stage_ids, f"no job ran under the job group {group}"

    def recorded() -> list[str] | None:
        tasks: dict[int, str] = {}
        for stage_id in stage_ids:
            attempts = _rest(session, f"stages/{stage_id}?details=true")
            if not any(attempt["status"] == "COMPLETE" for attempt in attempts):
                return None  # the listener has not seen its end yet
            for attempt in attempts:
                for task in attempt.get("tasks", {}).values():
                    if task["status"] == "SUCCESS":
                        tasks[task["taskId"]] = task["executorId"]
        return [tasks[task_id] for task_id in sorted(tasks)]

    found: list[str] = wait_until(
        recorded, timeout_s=timeout_s, message=f"the stages of {group} recorded"
    )
    return found
