"""Test helpers: where the broker is, unique names, polling, faults.

The broker is found once per test session, in this order:

1. ``PULSAR_STATE_TEST_SERVICE_URL`` and ``PULSAR_STATE_TEST_ADMIN_URL``: any
   running cluster (the CLI's ``PULSAR_SERVICE_URL``/``PULSAR_ADMIN_URL`` are
   ignored and dropped by ``conftest.py``: they may name a user's cluster);
2. a Pulsar container through testcontainers, when a Docker engine answers;
3. otherwise the project's own embedded standalone (``pulsar-state broker``),
   on ``.pulsar/test`` with fresh data.

``PULSAR_STATE_TEST_BROKER=env|container|standalone`` forces one of them;
``PULSAR_STATE_TEST_DATA_DIR`` moves the embedded broker's data directory (two
suites on one machine then each have their own broker).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import docker
import requests
from testcontainers.core.container import DockerContainer
from testcontainers.core.waiting_utils import wait_for_logs

from pulsar_state.cluster.admin import topic_path as _topic_path
from pulsar_state.deploy.distribution import DEFAULT_PULSAR_VERSION
from pulsar_state.deploy.standalone import StandaloneBroker

log = logging.getLogger(__name__)

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parent.parent
PULSAR_IMAGE = f"apachepulsar/pulsar:{DEFAULT_PULSAR_VERSION}"


#: the embedded test broker deletes inactive topics quickly, so that the state
#: core's topic protection is tested against the real thing
TEST_BROKER_SETTINGS = {
    "brokerDeleteInactiveTopicsFrequencySeconds": "5",
    "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": "5",
}


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def unique_topic(prefix: str = "t", namespace: str = "public/default") -> str:
    return f"persistent://{namespace}/{unique_name(prefix)}"


def function_instance_pids(name: str) -> list[int]:
    """Process ids of the Python function instances whose command line names ``name``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "python_instance_main.py" in cmd and "--function_id" in cmd and name in cmd:
                pids.append(int(entry.name))
    return sorted(pids)


def run_check_script(script: Path, *args: str, timeout_s: float) -> str:
    """Run a check script (``tests/*.py``) with this interpreter; its stdout.

    Fails the test, with the end of its output, unless it exits 0.
    """
    done = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout


def range_rows(opts: Any) -> list[tuple[str, int, int]]:
    """(key, ledger, entry) of each write a one-range Spark changelog read of
    ``opts`` (a ``SourceOptions``) yields, through the topic's last position now."""
    from pulsar_state.connectors.spark_ranges import plan_ranges, replay_range  # noqa: PLC0415

    (rng,) = plan_ranges(opts, opts.last_position(), 1)
    rows: list[tuple[str, int, int]] = []
    replay_range(
        opts,
        rng,
        on_write=lambda change: rows.extend(
            (op.key, change.position.ledger, change.position.entry) for op in change.ops
        ),
    )
    return rows


@contextlib.contextmanager
def unload_storm(
    admin_url: str, topic: str, *, for_s: float, every_s: float = 0.05
) -> Iterator[threading.Event]:
    """Unload ``topic`` again and again for ``for_s`` seconds (in a thread); the
    event yielded is set when the storm is over. Every 50 ms, a consumer or reader
    created meanwhile soon meets its topic closing (see
    test_spark_unload_race.py for what the C++ client does then)."""
    over = threading.Event()
    unloads = [0]

    def storm() -> None:
        ends = time.monotonic() + for_s
        while time.monotonic() < ends:
            requests.put(f"{admin_url}/admin/v2/{_topic_path(topic)}/unload", timeout=30)
            unloads[0] += 1
            time.sleep(every_s)
        over.set()

    thread = threading.Thread(target=storm, daemon=True)
    thread.start()
    try:
        yield over
    finally:
        thread.join(for_s + 60)
    # the storm did happen: dozens of unloads met the calls (not a rate: on a
    # loaded machine each unload takes longer, and 78 of a nominal 160 were seen)
    assert unloads[0] >= min(20, for_s / every_s), unloads


def wait_until(
    condition: Callable[[], T],
    *,
    timeout_s: float = 30.0,
    interval_s: float = 0.1,
    message: str = "condition",
) -> T:
    """Poll ``condition`` until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout_s
    last_exc: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # the condition may fail until it holds
            last_exc = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} did not hold within {timeout_s}s") from last_exc
        time.sleep(interval_s)


def join_draining(processes: list[Any], drain: Callable[[], object], *, timeout_s: float) -> None:
    """Join child processes that put on a ``multiprocessing`` queue, calling ``drain`` meanwhile.

    A child that has put items on a queue waits at its exit until its feeder
    thread has written them all into the queue's pipe. A parent that joins
    without reading waits with it as soon as the pipe is full (64 KiB: about a
    thousand small outcomes), until the join times out with the child alive
    ("joining processes that use queues" in the ``multiprocessing`` docs).
    """
    deadline = time.monotonic() + timeout_s
    for process in processes:
        while process.is_alive() and time.monotonic() < deadline:
            drain()
            process.join(0.5)
    drain()


@dataclass
class PulsarEndpoint:
    """A real broker for the tests, and what can be done to it."""

    service_url: str
    admin_url: str
    kind: str
    broker: StandaloneBroker | None = None
    container: Any = None
    functions: bool = True
    restarts: int = field(default=0)

    @property
    def can_restart(self) -> bool:
        return self.broker is not None

    def restart(self) -> None:
        """Stop and start the broker on the same ports and data, without the
        functions worker.

        Only the fault tests restart the broker, and they run last (conftest),
        after every function test. Pulsar 4.0.8's worker halts the whole
        standalone when, taking over as leader after a restart, it cannot see
        the end of its assignment topic within a hard-coded 10 s (seen on a
        loaded 2-core run: ``FunctionAssignmentTailer`` -> "Encountered fatal
        error. Shutting down."), which would fail the restart test for a reason
        that is not under test.
        """
        if self.broker is None:
            raise RuntimeError(f"cannot restart a {self.kind} broker from the tests")
        self.broker.functions = self.functions = False
        # a broker that does not stop in 15 s is killed: a wedged one (see
        # docs/findings/pulsar-4.0.8-fencing-deadlock.md) ignores SIGTERM
        info = self.broker.restart(stop_timeout_s=15.0)
        assert info.service_url == self.service_url
        self.restarts += 1

    def admin(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, f"{self.admin_url}{path}", timeout=30, **kwargs)

    def _broker_pids(self) -> list[int]:
        if self.broker is None:
            raise RuntimeError(f"cannot pause a {self.kind} broker from the tests")
        info = self.broker.status()
        if info is None:
            raise RuntimeError("the broker is not running")
        return _process_group(info.pid) or [info.pid]

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP to its whole process group): what a long
        GC pause or a stalled disk does. A publish in flight meanwhile gets no
        ack before its send timeout, yet the broker stores it once it resumes:
        its outcome is unknown to the client. Only for a standalone the tests
        started; :meth:`resume` lets it go on."""
        for pid in self._broker_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused broker go on (SIGCONT)."""
        for pid in self._broker_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The broker frozen for the ``with`` block (:meth:`pause`)."""
        self.pause()
        try:
            yield
        finally:
            self.resume()


def pulsar_state_cli(
    *args: str, env: dict[str, str], drop: tuple[str, ...] = (), timeout_s: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """``pulsar-state ARGS`` as a user runs it: this environment without the
    variables starting with ``drop``, plus ``env``; output captured, never raises."""
    full = {k: v for k, v in os.environ.items() if not (drop and k.startswith(drop))}
    full.update(env)
    return subprocess.run(
        [str(Path(sys.executable).parent / "pulsar-state"), *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def wait_for_metadata_manager(endpoint: PulsarEndpoint, group: str) -> None:
    """Wait until a worker of ``group`` (in ``public/default``) runs the group's
    metadata manager: it starts at the latest request, so one sent before is lost."""
    requests_path = f"public/default/{group}-requests"
    wait_until(
        lambda: (
            endpoint.admin("GET", f"/admin/v2/persistent/{requests_path}/stats")
            .json()
            .get("subscriptions", {})
            .get(f"public/default/{group}-metadata-manager", {})
            .get("consumers")
        ),
        timeout_s=120,
        interval_s=1,
        message="the worker's metadata manager subscribed",
    )


@contextlib.contextmanager
def pulsar_state_worker(
    endpoint: PulsarEndpoint,
    group: str,
    log_path: Path,
    *,
    worker_env: dict[str, str] | None = None,
    member_ttl_s: float = 4.0,
) -> Iterator[dict[str, str]]:
    """A ``pulsar-state worker`` process of ``group`` on ``endpoint``, as a user runs it
    (its output in ``log_path``), ready once its metadata manager listens; yields the
    environment that names the cluster and the group for ``pulsar-state functions``
    (:func:`pulsar_state_cli`). ``worker_env``: more variables for the worker only.
    SIGTERM stops it after the block, which must exit 0 (it stops its instances and
    leaves the group)."""
    env = {
        "PULSAR_SERVICE_URL": endpoint.service_url,
        "PULSAR_ADMIN_URL": endpoint.admin_url,
        "PULSAR_STATE_FUNCTIONS_GROUP": group,
    }
    command = [str(Path(sys.executable).parent / "pulsar-state"), "-v", "worker"]
    with log_path.open("w") as log_file:
        worker = subprocess.Popen(
            [*command, "--member-ttl", str(member_ttl_s)],
            env={**os.environ, **env, **(worker_env or {})},
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_metadata_manager(endpoint, group)
            yield env
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                assert worker.wait(60) == 0, log_path.read_text()[-4000:]
            finally:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait(30)


def compact_topic(admin_url: str, topic: str, *, timeout_s: float = 90.0) -> None:
    """Compact ``topic`` through the admin API and wait until compaction succeeded."""
    from pulsar_state.cluster.admin import PulsarAdmin  # noqa: PLC0415 - harness imports stay light

    admin = PulsarAdmin(admin_url)
    try:
        admin.compact(topic)
        wait_until(
            lambda: admin.compaction_status(topic) == "SUCCESS",
            timeout_s=timeout_s,
            interval_s=0.5,
            message=f"compaction of {topic} finished",
        )
    finally:
        admin.close()


def _docker_answers() -> bool:
    try:
        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


def _container_endpoint() -> PulsarEndpoint:
    container = (
        DockerContainer(PULSAR_IMAGE)
        .with_command("bin/pulsar standalone --no-stream-storage")
        .with_exposed_ports(6650, 8080)
    )
    container.start()
    wait_for_logs(container, "Function worker service started", timeout=240)
    host = container.get_container_host_ip()
    return PulsarEndpoint(
        service_url=f"pulsar://{host}:{container.get_exposed_port(6650)}",
        admin_url=f"http://{host}:{container.get_exposed_port(8080)}",
        kind="container",
        container=container,
    )


#: a cluster for the suite, by URL (both set): the suite's own variables
TEST_SERVICE_URL_ENV = "PULSAR_STATE_TEST_SERVICE_URL"
TEST_ADMIN_URL_ENV = "PULSAR_STATE_TEST_ADMIN_URL"


_SESSION_DIR: Path | None = None
_SESSION_LOCK: Any = None  # the open lock file, held until the process exits


def session_data_dir() -> Path:
    """Where this test session keeps its broker (and names its other servers):
    ``PULSAR_STATE_TEST_DATA_DIR`` or ``.pulsar/test``, locked for the session.

    Each session stops a broker left on its directory and starts it fresh; two
    sessions at once on one directory (a developer's second terminal, parallel
    runs) would stop each other's broker. The second one gets ``<dir>-<pid>``.
    """
    global _SESSION_DIR, _SESSION_LOCK
    if _SESSION_DIR is not None:
        return _SESSION_DIR
    base = Path(os.environ.get("PULSAR_STATE_TEST_DATA_DIR") or REPO_ROOT / ".pulsar" / "test")
    for candidate in (base, base.with_name(f"{base.name}-{os.getpid()}")):
        candidate.mkdir(parents=True, exist_ok=True)
        lock = open(candidate / ".session.lock", "w")  # noqa: SIM115 (held for the session)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        if candidate != base:
            log.warning("%s is used by another test session; this one uses %s", base, candidate)
        _SESSION_DIR, _SESSION_LOCK = candidate, lock
        return candidate
    raise RuntimeError(f"no free test data directory beside {base}")


def start_endpoint() -> PulsarEndpoint:
    forced = os.environ.get("PULSAR_STATE_TEST_BROKER", "")
    # the suite's own variables, never the CLI's PULSAR_SERVICE_URL/PULSAR_ADMIN_URL:
    # exported for the CLI they name a user's cluster, which tests must not write to
    service_url = os.environ.get(TEST_SERVICE_URL_ENV)
    admin_url = os.environ.get(TEST_ADMIN_URL_ENV)
    if forced == "env" or (not forced and service_url and admin_url):
        if not (service_url and admin_url):
            raise RuntimeError(f"{TEST_SERVICE_URL_ENV} and {TEST_ADMIN_URL_ENV} must both be set")
        return PulsarEndpoint(service_url=service_url, admin_url=admin_url, kind="env")
    if forced == "container" or (not forced and _docker_answers()):
        return _container_endpoint()
    broker = StandaloneBroker(data_dir=session_data_dir(), broker_settings=TEST_BROKER_SETTINGS)
    broker.stop()  # a broker left by an interrupted session
    info = broker.start(fresh=True)
    return PulsarEndpoint(
        service_url=info.service_url, admin_url=info.admin_url, kind="standalone", broker=broker
    )


def start_fencing_endpoint(main: PulsarEndpoint) -> PulsarEndpoint:
    """Where tests make writers fence each other densely (``access_mode="fencing"``).

    Pulsar 4.0.8 can deadlock when a producer is fenced while its publishes
    complete (``docs/findings/pulsar-4.0.8-fencing-deadlock.md``); a wedged broker
    ignores SIGTERM and stops every later test of the session. Such tests get a
    private standalone without the functions worker when the session's broker is
    our own; with any other broker (a cluster by URL, a container) they share it.
    """
    if main.broker is None:
        return main
    base = session_data_dir()
    data_dir = base.with_name(f"{base.name}-fencing")
    broker = StandaloneBroker(
        data_dir=data_dir, broker_settings=TEST_BROKER_SETTINGS, functions=False
    )
    broker.stop()  # a broker left by an interrupted session
    info = broker.start(fresh=True)
    return PulsarEndpoint(
        service_url=info.service_url,
        admin_url=info.admin_url,
        kind="standalone",
        broker=broker,
        functions=False,
    )


def _process_group(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after ")"
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def broker_deadlock(endpoint: PulsarEndpoint) -> str | None:
    """The JVM's own deadlock report (``jstack``) of a standalone the tests
    started, or ``None`` when it has none (or is not ours to inspect)."""
    if endpoint.broker is None:
        return None
    info = endpoint.broker.status()
    if info is None:
        return None
    for pid in _process_group(info.pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"java" not in cmd.split(b"\0", 1)[0]:
            continue
        try:
            dump = subprocess.run(
                ["jstack", str(pid)], capture_output=True, text=True, timeout=60, check=False
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        start = dump.find("Found one Java-level deadlock")
        if start >= 0:
            return dump[start : start + 6000]
    return None


def unless_broker_deadlocked(endpoint: PulsarEndpoint, run: Callable[[], T], *, what: str) -> T:
    """``run()``; if it fails and the broker's JVM reports a deadlock, kill the
    broker, start it fresh and ``run()`` once more (a second failure stands).

    Only for tests that provoke Pulsar 4.0.8's fencing deadlock on purpose (see
    :func:`start_fencing_endpoint`): the deadlock is the broker's, so a run it
    cut short says nothing of the code under test, and the warning keeps it
    visible in the session's summary. Any failure without a deadlock report is
    the test's own and is raised at once.
    """
    try:
        return run()
    except Exception:
        report = broker_deadlock(endpoint)
        if report is None or endpoint.broker is None:
            raise
        message = (
            f"{what}: the broker deadlocked (Pulsar 4.0.8 fencing deadlock, "
            "docs/findings/pulsar-4.0.8-fencing-deadlock.md); restarted it fresh and ran again"
        )
        log.warning("%s\n%s", message, report)
        warnings.warn(message, stacklevel=2)
        endpoint.broker.kill()
        info = endpoint.broker.start(fresh=True)
        assert info.service_url == endpoint.service_url
        endpoint.restarts += 1
    return run()


def stop_endpoint(endpoint: PulsarEndpoint) -> None:
    if endpoint.broker is not None:
        endpoint.broker.stop()
    if endpoint.container is not None:
        endpoint.container.stop()
