"""Instances of the SQL sink in processes of their own, for the takeover tests.

Each runs until it is killed (``kill -9``), in a child started by
``multiprocessing`` (``spawn`` or ``fork``):

* :func:`function_instance`: ``SinkFunction`` inside the distribution's own
  Python function runtime (``python_instance_main.py``, the program the
  functions worker starts for each instance), with the function details the
  worker gives a sink deployed with ``--retain-ordering --parallelism 2``: a
  failover subscription, at-least-once, acknowledged after ``process``
  returns, negatively acknowledged when it raises. Only the worker is left
  out: the test starts, kills and restarts the instances itself.
* :func:`runner_instance`: ``pulsar-state sink run`` on its own (``run_sink``),
  a failover subscription on the whole topic.

:func:`consumer_pid` finds the process behind a consumer of the topic stats
(its ``address``), so that a test can kill the active one. Each instance dumps
its threads' stacks to ``<log dir>/stacks-<pid>.txt`` on ``SIGUSR1``
(``stacks.dump_stacks``), for a test that waits on it in vain.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from stacks import stacks_on_sigusr1

# imported before a fork: a forked child starts with the parent's modules
from pulsar_state.connectors.sink_runner import run_sink


def python_instance_dir() -> Path:
    """``instances/python-instance`` of the cached Pulsar distribution (the worker's)."""
    from pulsar_state.deploy.distribution import PulsarDistribution  # noqa: PLC0415

    return PulsarDistribution().python_instance_main.parent


def sink_function_details(
    *, name: str, topic: str, user_config: dict[str, Any], parallelism: int = 2
) -> dict[str, Any]:
    """What the worker hands an instance of ``SinkFunction`` deployed with
    ``pulsar-admin functions create --retain-ordering --parallelism N`` (no output)."""
    return {
        "tenant": "public",
        "namespace": "default",
        "name": name,
        "className": "sink_entry.SinkFunction",
        "userConfig": json.dumps(user_config),
        "autoAck": True,
        "parallelism": parallelism,
        "runtime": "PYTHON",
        "processingGuarantees": "ATLEAST_ONCE",
        "retainOrdering": True,
        "source": {
            "subscriptionType": "FAILOVER",
            "inputSpecs": {topic: {}},
            "cleanupSubscription": True,
        },
        "sink": {},
        "componentType": "FUNCTION",
    }


def function_instance(
    service_url: str,
    details: dict[str, Any],
    *,
    instance_id: int,
    port: int,
    metrics_port: int,
    log_dir: str,
) -> None:
    """Run one instance of the function ``details`` until killed, as the worker does."""
    from importlib import resources  # noqa: PLC0415

    stacks_on_sigusr1(log_dir)
    sys.path.insert(0, str(python_instance_dir()))
    entry = Path(str(resources.files("pulsar_state.connectors") / "sink_entry.py"))
    sys.argv = [
        "python_instance_main.py",
        "--function_details",
        json.dumps(details),
        "--py",
        str(entry),
        "--instance_id",
        str(instance_id),
        "--function_id",
        "test-function-id",
        "--function_version",
        "1",
        "--pulsar_serviceurl",
        service_url,
        "--port",
        str(port),
        "--metrics_port",
        str(metrics_port),
        "--max_buffered_tuples",
        "1024",
        "--logging_directory",
        log_dir,
        "--logging_file",
        details["name"],
        "--logging_config_file",
        str(
            python_instance_dir().parent.parent
            / "conf"
            / "functions-logging"
            / "logging_config.ini"
        ),
        "--logging_level",
        "info",
        "--expected_healthcheck_interval",
        "-1",
        "--cluster_name",
        "standalone",
    ]
    import python_instance_main  # type: ignore[import-not-found]  # noqa: PLC0415

    python_instance_main.main()


def runner_instance(config: dict[str, Any], log_file: str) -> None:
    """``pulsar-state sink run`` with ``config`` until killed; its log to ``log_file``."""
    import logging  # noqa: PLC0415

    stacks_on_sigusr1(str(Path(log_file).parent))
    root = logging.getLogger()
    for handler in list(root.handlers):  # a forked child keeps the parent's handlers
        root.removeHandler(handler)
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    run_sink(config)


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def consumer_pid(address: str, pids: list[int]) -> int | None:
    """Which of ``pids`` holds the connection a consumer's stats name (``/127.0.0.1:PORT``)."""
    host_port = address.lstrip("/")
    _, _, port = host_port.rpartition(":")
    if not port.isdigit():
        return None
    local = f"{int(port):04X}"
    owners: dict[str, int] = {}
    for pid in pids:
        try:
            for inode in _socket_inodes(pid):
                owners[inode] = pid
        except OSError:
            continue
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[1].rsplit(":", 1)[1] == local and fields[9] in owners:
                return owners[fields[9]]
    return None
