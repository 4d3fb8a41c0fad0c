"""The demo's last step: the word count on three ``pulsar-state worker`` processes.

Three workers of one per-run group run as OS processes, each started as a user
starts one (``python -m pulsar_state.cli worker --group ...``, with the demo's
URLs and, in its environment, the demo's authentication and TLS trust), its
output in a log file. Each runs the group's metadata manager and scheduler
(failover subscriptions: the active scheduler is the leader) and the instances
assigned to it.

The word count (:mod:`pulsar_state.functions.wordcount_entry`, unchanged) is
created through the group's metadata manager
(:class:`~pulsar_state.functions.function_admin.FunctionAdmin`) with two
instances on a two-partition input. The step counts lines, SIGKILLs a worker
that runs an instance, waits until the leader has moved that instance to a
live worker and it consumes there, counts more lines and shows the counts
exact. Every wait is bounded and fails naming the workers' logs; the workers
are stopped (SIGTERM, then SIGKILL) whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import pulsar

from pulsar_state.client_log import client_logger
from pulsar_state.cluster.admin import PulsarAdmin, topic_path
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.deploy.narration import say, step
from pulsar_state.deploy.polling import poll_until
from pulsar_state.deploy.processes import launch, tail_lines
from pulsar_state.errors import OperationTimeoutError, PulsarStateError
from pulsar_state.functions.function_admin import FunctionAdmin
from pulsar_state.functions.worker_config import DEFAULT_NAMESPACE, WorkerTopics
from pulsar_state.map.pulsar_map import PulsarMap
from pulsar_state.topic_names import full_topic_name

__all__ = ["WORKER_IDS", "DemoWorkers", "workers_demo"]

T = TypeVar("T")

WORKER_IDS = ("worker-1", "worker-2", "worker-3")
#: a worker not heard from within this is dead and its instances move (short, for the demo)
MEMBER_TTL_S = 3.0
RECONCILE_INTERVAL_S = 0.5
#: the bound of each wait of the step
WAIT_S = 120.0
#: the demo's settings a worker could otherwise take from the environment or client.conf
_INHERITED = (
    "PULSAR_AUTH_",
    "PULSAR_TLS_",
    "PULSAR_SERVICE_URL",
    "PULSAR_ADMIN_URL",
    "PULSAR_CLIENT_CONF",
    "PULSAR_STATE_FUNCTIONS_",
)

FIRST = ["the quick brown fox", "jumps over the lazy dog", "the dog sleeps"] * 6
SECOND = ["a fox runs", "the lazy dog sleeps again"] * 6


def _auth_env(auth: ClusterAuth) -> dict[str, str]:
    """The environment variables the worker command reads ``auth`` from (not its
    command line: a token stays out of ``ps``)."""
    env = {
        "PULSAR_AUTH_TOKEN": auth.auth_token,
        "PULSAR_AUTH_PLUGIN": auth.auth_plugin,
        "PULSAR_AUTH_PARAMS": auth.auth_params,
        "PULSAR_TLS_TRUST_CERT_PATH": auth.tls_trust_cert_path,
        "PULSAR_TLS_ALLOW_INSECURE": "true" if auth.tls_allow_insecure else None,
        "PULSAR_TLS_ENABLE_HOSTNAME_VERIFICATION": (
            "true" if auth.tls_hostname_verification else None
        ),
    }
    return {k: v for k, v in env.items() if v}


@dataclass
class _Worker:
    worker_id: str
    log: Path
    process: subprocess.Popen[bytes] | None = None
    killed: bool = False


class DemoWorkers:
    """Three ``pulsar-state worker`` processes of one group, and bounded waits on them."""

    def __init__(
        self,
        *,
        group: str,
        service_url: str,
        admin_url: str,
        auth: ClusterAuth,
        logs_dir: Path,
        worker_ids: Sequence[str] = WORKER_IDS,
    ) -> None:
        self.group = group
        self.logs_dir = logs_dir
        self._service_url = service_url
        self._admin_url = admin_url
        self._auth = auth
        self.workers = {w: _Worker(w, logs_dir / f"{group}-{w}.log") for w in worker_ids}

    def command(self, worker_id: str) -> list[str]:
        """The command line of one worker (its credentials are in its environment)."""
        return [
            sys.executable,
            "-m",
            "pulsar_state.cli",
            "-v",  # its log says what it starts and stops
            "worker",
            "--worker-id",
            worker_id,
            "--group",
            self.group,
            "--functions-namespace",
            DEFAULT_NAMESPACE,
            "--service-url",
            self._service_url,
            "--admin-url",
            self._admin_url,
            "--member-ttl",
            str(MEMBER_TTL_S),
            "--reconcile-interval",
            str(RECONCILE_INTERVAL_S),
        ]

    def start(self) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED)}
        env.update(_auth_env(self._auth))
        for worker in self.workers.values():
            worker.process = launch(
                self.command(worker.worker_id), cwd=self.logs_dir, env=env, log_file=worker.log
            )

    def logs(self, *worker_ids: str) -> str:
        chosen = worker_ids or tuple(self.workers)
        return ", ".join(str(self.workers[w].log) for w in chosen)

    def pid(self, worker_id: str) -> int:
        process = self.workers[worker_id].process
        assert process is not None
        return process.pid

    def check_alive(self) -> None:
        """Raise, with its log's last lines, if a worker not killed on purpose has exited."""
        for worker in self.workers.values():
            process = worker.process
            if worker.killed or process is None or process.poll() is None:
                continue
            raise PulsarStateError(
                f"{worker.worker_id} (`pulsar-state worker`, pid {process.pid}) exited "
                f"(code {process.returncode}); "
                f"its log: {worker.log}\n--- last log lines ---\n{tail_lines(worker.log, 20)}"
            )

    def kill(self, worker_id: str) -> None:
        """``kill -9`` one worker: it cannot stop its instances or leave the group."""
        worker = self.workers[worker_id]
        assert worker.process is not None
        worker.killed = True
        worker.process.send_signal(signal.SIGKILL)
        worker.process.wait(30)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM every worker still running (each stops its instances and leaves the
        group), wait up to ``timeout_s``, SIGKILL what is left (see :meth:`stopped`)."""
        running = [
            w.process for w in self.workers.values() if w.process and w.process.poll() is None
        ]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for process in running:
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)

    def stopped(self) -> str:
        """How the workers not killed on purpose ended: ``worker-2 exit 0, ...``."""
        return ", ".join(
            f"{w.worker_id} exit {w.process.returncode}"
            for w in self.workers.values()
            if w.process is not None and not w.killed
        )

    def wait_for(
        self,
        condition: Callable[[], T | None],
        *,
        what: str,
        logs: Sequence[str] = (),
        timeout_s: float = WAIT_S,
        interval_s: float = 0.5,
        seen: Callable[[], str] | None = None,
    ) -> T:
        """Poll ``condition`` until it returns a truthy value; return it.

        A Pulsar or project error raised by ``condition`` counts as "not yet".
        A worker that exits on its own fails the wait at once (each round
        checks, :meth:`check_alive`); after ``timeout_s`` it fails with
        :class:`OperationTimeoutError` naming the workers' logs (those of
        ``logs``, else all). The loop: :func:`~pulsar_state.deploy.polling.poll_until`.

        Returns:
            The first truthy value of ``condition``.

        Raises:
            OperationTimeoutError: not within ``timeout_s``.
            PulsarStateError: a worker exited on its own.
        """

        def timed_out(message: str) -> OperationTimeoutError:
            return OperationTimeoutError(f"{message}; the workers' logs: {self.logs(*logs)}")

        return poll_until(
            condition,
            what=what,
            timeout_s=timeout_s,
            interval_s=interval_s,
            seen=seen,
            error=timed_out,
            check=self.check_alive,
        )


def word_count_config(source: str, state_topic: str, admin_url: str | None) -> dict[str, Any]:
    """The word count's config for the group's metadata manager: the packaged entry file."""
    user_config: dict[str, Any] = {"stateTopic": state_topic}
    if admin_url is not None:
        user_config["adminUrl"] = admin_url
    return {
        "py": str(resources.files("pulsar_state.functions") / "wordcount_entry.py"),
        "className": "wordcount_entry.WordCount",
        "inputs": [source],
        "parallelism": 2,
        "retainOrdering": True,  # the kit's requirement: one active instance per partition
        "subscriptionPosition": "Earliest",
        "userConfig": user_config,
    }


def _partition_consumers(admin: PulsarAdmin, topic: str, subscription: str) -> list[list[str]]:
    """Per partition of ``topic``: the consumer names on ``subscription``, active one first."""
    resp = admin.request(
        "GET", f"/admin/v2/{topic_path(topic)}/partitioned-stats?perPartition=true"
    )
    if resp.status_code != 200:
        return []
    partitions = resp.json().get("partitions") or {}
    found = []
    for _, stats in sorted(partitions.items()):
        sub = (stats.get("subscriptions") or {}).get(subscription) or {}
        names = sorted(c.get("consumerName", "") for c in sub.get("consumers") or [])
        active = sub.get("activeConsumerName")
        if active in names:
            names.remove(active)
            names.insert(0, active)
        found.append(names)
    return found


def _leader(admin: PulsarAdmin, topics: WorkerTopics, group: str) -> str | None:
    """The worker whose scheduler is active (the failover subscription's active consumer)."""
    resp = admin.request("GET", f"/admin/v2/{topic_path(topics.heartbeats)}/stats")
    if resp.status_code != 200:
        return None
    sub = (resp.json().get("subscriptions") or {}).get(f"{DEFAULT_NAMESPACE}/{group}-scheduler")
    active = (sub or {}).get("activeConsumerName")
    return active if isinstance(active, str) else None


def workers_demo(
    service_url: str,
    admin_url: str,
    suffix: str,
    *,
    auth: ClusterAuth,
    logs_dir: Path | None = None,
) -> None:
    """The step (module docstring); raises PulsarStateError naming the workers' logs."""
    group = f"demo-{suffix}"
    name = f"wordcount-{suffix}"
    fqn = f"{DEFAULT_NAMESPACE}/{name}"
    source = full_topic_name(f"wordcount-workers-in-{suffix}")
    state_topic = full_topic_name(f"wordcount-workers-state-{suffix}")
    step(f"the word count on three `pulsar-state worker` processes (group {group})")
    workers = DemoWorkers(
        group=group,
        service_url=service_url,
        admin_url=admin_url,
        auth=auth,
        logs_dir=(logs_dir or Path(tempfile.gettempdir()) / f"pulsar-state-demo-{suffix}")
        / "workers",
    )
    topics = WorkerTopics.of(group)
    t0 = time.monotonic()
    with contextlib.ExitStack() as cleanup:
        client = pulsar.Client(service_url, logger=client_logger(), **auth.client_kwargs())
        cleanup.callback(client.close)
        admin = auth.admin_endpoint(admin_url).admin()
        cleanup.callback(admin.close)
        functions = FunctionAdmin(client, topics, timeout_s=60)
        created = admin.request("PUT", f"/admin/v2/{topic_path(source)}/partitions", json=2)
        if created.status_code not in (200, 204):
            raise PulsarStateError(
                f"creating the partitioned topic {source} failed "
                f"({created.status_code}: {created.text[:300]})"
            )
        # the demo protects the state topic (infinite retention) through its admin client
        counts = cleanup.enter_context(
            PulsarMap[str, Any](client, state_topic, admin=auth.admin_endpoint(admin_url))
        )
        cleanup.callback(workers.stop)  # whatever happens: SIGTERM, wait, SIGKILL
        workers.start()
        pids = ", ".join(f"{w} (pid {workers.pid(w)})" for w in workers.workers)
        say(f"  started {pids}")
        say(
            f"  each: pulsar-state worker --group {group} --member-ttl {MEMBER_TTL_S:g} "
            f"...; logs in {workers.logs_dir}"
        )
        workers.wait_for(
            lambda: functions.members() == sorted(workers.workers),
            what=f"three live workers in the group {group}",
            seen=lambda: f"live: {functions.members()}",
        )
        leader = workers.wait_for(
            lambda: _leader(admin, topics, group),
            what=f"a leader (an active scheduler) in the group {group}",
        )
        say(f"  three members; the leader (the active scheduler) is {leader}")

        # workers run the user's function with the group's records only: no secrets
        # there, so with authentication the demo, not the function, protects its topic
        config = word_count_config(source, state_topic, admin_url if auth.kind is None else None)
        record = functions.create(fqn, config)
        say(
            f"  created {fqn} through the group's metadata manager "
            f"(version {record['version']}, 2 instances, input {source} with 2 partitions)"
        )

        def placement() -> dict[str, str] | None:
            placed = {p.instance: p.worker for p in functions.status(fqn) if p.worker_alive}
            ok = len(placed) == 2 and len(set(placed.values())) == 2
            return {k: v for k, v in placed.items() if v is not None} if ok else None

        def running(instances: dict[str, str]) -> bool:
            """Both instances consume: each is a consumer on both partitions (failover)."""
            consumers = _partition_consumers(admin, source, fqn)
            return len(consumers) == 2 and all(sorted(c) == sorted(instances) for c in consumers)

        def placed_and_running() -> dict[str, str] | None:
            placed = placement()
            return placed if placed is not None and running(placed) else None

        def moved(victim: str) -> dict[str, str] | None:
            placed = placed_and_running()
            return placed if placed is not None and victim not in placed.values() else None

        placed = workers.wait_for(
            placed_and_running,
            what=f"the two instances of {fqn} placed on two workers and consuming",
            seen=lambda: (
                f"placed: {placement()}, consumers: {_partition_consumers(admin, source, fqn)}"
            ),
        )
        _show(placed, workers, admin, source, fqn)

        producer = client.create_producer(source)
        cleanup.callback(producer.close)
        expected: Counter[str] = Counter()

        def send(lines: list[str]) -> None:
            for i, line in enumerate(lines):  # keyed: spread over both partitions
                producer.send(line.encode(), partition_key=f"line-{i}")
            producer.flush()
            expected.update(w for line in lines for w in line.split())

        def counted() -> dict[str, int]:
            return {
                k.removeprefix("counter/"): v
                for k, v in counts.items(latest=True).result(60).items()
                if k.startswith("counter/")
            }

        def reached() -> dict[str, int] | None:
            got = counted()
            return got if got == dict(expected) else None

        def exact(logs: Sequence[str]) -> None:
            got = workers.wait_for(
                reached,
                what=f"the counts of {fqn} on {state_topic} to reach {dict(expected)}",
                logs=logs,
                seen=lambda: f"they are {counted()}",
            )
            top = ", ".join(f"{w}={n}" for w, n in sorted(got.items(), key=lambda x: -x[1])[:6])
            say(f"  counters: {top}  exact={got == dict(expected)}")

        say(f"  sending {len(FIRST)} lines")
        send(FIRST)
        exact(tuple(placed.values()))

        instance = f"{fqn}:0"
        victim = placed[instance]
        say(f"  kill -9 {victim} (pid {workers.pid(victim)}), which runs {instance}")
        killed_at = time.monotonic()
        workers.kill(victim)

        now = workers.wait_for(
            lambda: moved(victim),
            what=f"{instance} moved from the killed {victim} to a live worker, and consuming",
            seen=lambda: (
                f"placed: {placement()}, consumers: {_partition_consumers(admin, source, fqn)}"
            ),
        )
        other = f"{fqn}:1"
        kept = "stayed on" if now[other] == placed[other] else "moved to"
        say(
            f"  {instance} moved to {now[instance]} in {time.monotonic() - killed_at:.1f}s "
            f"(member TTL {MEMBER_TTL_S:g}s); {other} {kept} {now[other]}"
        )
        _show(now, workers, admin, source, fqn)
        say(f"  sending {len(SECOND)} more lines")
        send(SECOND)
        exact(tuple(now.values()))
    say(f"  stopped the workers with SIGTERM ({workers.stopped()}); logs: {workers.logs()}")
    say(f"  the step took {time.monotonic() - t0:.0f}s")


def _show(
    placed: dict[str, str],
    workers: DemoWorkers,
    admin: PulsarAdmin,
    source: str,
    fqn: str,
) -> None:
    """Print which worker runs which instance, which instance reads which partition and
    which worker leads."""
    consumers = _partition_consumers(admin, source, fqn)
    leader = _leader(admin, WorkerTopics.of(workers.group), workers.group)
    reads = {
        instance: [str(i) for i, names in enumerate(consumers) if names[:1] == [instance]]
        for instance in placed
    }
    runs = {w: sorted(i for i, at in placed.items() if at == w) for w in workers.workers}
    for worker_id, instances in runs.items():
        if workers.workers[worker_id].killed:
            continue
        what = (
            ", ".join(f"{i} (active on partition {', '.join(reads[i]) or '-'})" for i in instances)
            or "no instance"
        )
        role = " (leader)" if worker_id == leader else ""
        say(f"    {worker_id}{role}: {what}")
