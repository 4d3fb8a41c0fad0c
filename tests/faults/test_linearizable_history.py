"""Contended compare-and-set and increments under kill -9, fencing and restarts.

Four (or more) client processes run random ``read(latest)``, ``replace`` (CAS)
and ``update`` (increment) operations on the keys of a PulsarMap (one key, or
several: each key's sub-history is checked on its own, which is sound because
linearizability is local), each writer
taking the topic over from the others (``ExclusiveWithFencing``). A nemesis
kills processes with SIGKILL (their last operation stays unknown) or restarts
the broker. Afterwards the whole history plus a final latest read by a fresh
client must be linearizable, and no acknowledged increment may be missing.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest
from admin_proxy import AdminProxy
from fault_report import FaultReport, FaultScale
from harness import PulsarEndpoint, unique_topic, unless_broker_deadlocked
from linearizability import Op, check_register
from workload import (
    START_METHODS,
    Fault,
    HistoryStats,
    Workload,
    count_takeovers,
    first_success_after,
    load_history,
)

from pulsar_state import PulsarMap

KEY = "register"
KEYS = ("register", "x", "y")


def _check(
    client: pulsar.Client, admin_url: str, workload: Workload, report: FaultReport, test: str
) -> HistoryStats:
    killed = {int(f.detail.split()[1]) for f in workload.faults if f.kind == "kill -9"}
    for process, code in workload.exit_codes().items():
        if process not in killed:
            assert code == 0, f"worker {process} exited {code}:\n{workload.worker_log(process)}"
    stats = load_history(workload.workdir)
    keys = workload.keys or (workload.key,)
    finals: dict[str, tuple[int, float, float]] = {}
    with PulsarMap[str, int](client, workload.topic, admin_url=admin_url) as fresh:
        for key in keys:
            call = time.monotonic_ns() / 1e9
            final = fresh.get(key, latest=True).result(60)
            assert final is not None
            finals[key] = (final, call, time.monotonic_ns() / 1e9)
    violations = lost = 0
    failures = []
    for key in keys:
        per_key = load_history(workload.workdir, key) if len(keys) > 1 else stats
        final, call, ret = finals[key]
        result = check_register([*per_key.ops, Op(-1, "read", None, final, call, ret)], initial=0)
        if not result.ok:
            violations += 1
            failures.append(f"{key}: longest linearizable prefix {result.longest_prefix}")
        lost += max(0, per_key.acked_increments - final)
        assert final <= per_key.acked_increments + per_key.unknown_writes, key
        assert per_key.ok > 5, f"too few operations on {key} to mean anything"
    recoveries = [f"{f.recovery_s:.1f}s" for f in workload.faults if f.recovery_s is not None]
    report.add(
        test=test,
        ops=len(stats.ops) + len(keys),
        ok=stats.ok + len(keys),
        unknown=stats.unknown,
        failed=stats.failed,
        faults=", ".join(
            sorted(
                {
                    f"{sum(x.kind == f.kind for x in workload.faults)}x {f.kind}"
                    for f in workload.faults
                }
            )
        )
        or "none",
        takeovers=count_takeovers(client, workload.topic),
        violations=violations,
        lost=lost,
        recovery=", ".join(recoveries) or "-",
    )
    assert not failures, f"not linearizable: {failures}"
    assert lost == 0
    assert stats.ok > 20, "too few operations completed to mean anything"
    return stats


def _killer(fault_scale: FaultScale, rng: random.Random) -> Callable[[Workload], None]:
    """A nemesis: kill -9 a random worker every ``kill_every_s`` (jittered) until
    five seconds before the end."""

    def nemesis(w: Workload) -> None:
        while True:
            time.sleep(fault_scale.kill_every_s * rng.uniform(0.5, 1.5))
            if w.elapsed() > w.seconds - 5:
                return
            w.kill_random(rng)

    return nemesis


def _seed_register(
    client: pulsar.Client, topic: str, admin_url: str, keys: tuple[str, ...] = (KEY,)
) -> None:
    with PulsarMap[str, int](client, topic, admin_url=admin_url) as m:
        m.put_all(dict.fromkeys(keys, 0)).result(60)


@pytest.mark.parametrize(
    ("start_method", "access_mode"),
    [(method, "adaptive") for method in START_METHODS] + [("exec", "fencing")],
)
def test_contended_cas_and_increments_under_kill_9_are_linearizable(
    *,
    request: pytest.FixtureRequest,
    pulsar_endpoint: PulsarEndpoint,
    client: pulsar.Client,
    tmp_path: Path,
    fault_scale: FaultScale,
    fault_report: FaultReport,
    start_method: str,
    access_mode: str,
) -> None:
    """Workers started every way: a new interpreter, or forked after the parent
    imported pulsar_state and used a client (fork), forkserver and spawn; in the
    default access mode (queueing writers), and with writers fencing each other.

    Writers fencing each other this densely can deadlock a Pulsar 4.0.8 broker:
    that run gets a broker of its own and, if the broker's JVM reports that
    deadlock, one more run on a fresh broker (``unless_broker_deadlocked``)."""
    if access_mode != "fencing":
        _contended_history(
            pulsar_endpoint, client, tmp_path, fault_scale, fault_report, start_method, access_mode
        )
        return
    if fault_scale.name != "full":
        # on 4.0.8 this workload deadlocked the broker twice in a row in one
        # clean-clone run (jstack-confirmed, then again on a fresh broker): in
        # `make test` it would test the broker's bug, not our code
        pytest.skip(
            "dense fencing deadlocks Pulsar 4.0.8 (docs/findings/pulsar-4.0.8-fencing-"
            "deadlock.md); runs with make test-faults (PULSAR_STATE_FAULTS=full)"
        )
    endpoint: PulsarEndpoint = request.getfixturevalue("fencing_endpoint")
    attempts = iter(range(1, 3))

    def attempt() -> None:
        own = pulsar.Client(
            endpoint.service_url,
            operation_timeout_seconds=15,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
        )
        try:
            _contended_history(
                endpoint,
                own,
                tmp_path / f"attempt-{next(attempts)}",
                fault_scale,
                fault_report,
                start_method,
                access_mode,
            )
        finally:
            own.close()

    unless_broker_deadlocked(endpoint, attempt, what="fencing writers under kill -9")


def _contended_history(  # noqa: PLR0917 - one call site each, all required
    endpoint: PulsarEndpoint,
    client: pulsar.Client,
    workdir: Path,
    fault_scale: FaultScale,
    fault_report: FaultReport,
    start_method: str,
    access_mode: str,
) -> None:
    topic = unique_topic(f"lin-{start_method}-{access_mode}")
    _seed_register(client, topic, endpoint.admin_url, KEYS)
    workload = Workload(
        service_url=endpoint.service_url,
        admin_url=endpoint.admin_url,
        topic=topic,
        key=KEY,
        keys=KEYS,
        workdir=workdir,
        workers=fault_scale.workers,
        seconds=fault_scale.seconds,
        seed=1,
        start_method=start_method,
        access_mode=access_mode,
    )
    workload.run_with(_killer(fault_scale, random.Random(1)))
    assert any(f.kind == "kill -9" for f in workload.faults)
    stats = _check(
        client,
        endpoint.admin_url,
        workload,
        fault_report,
        f"kill -9, {access_mode} writers (3 keys, {start_method})",
    )
    # kill -9 leaves the killed process's last operation unknown; any other
    # unknown outcome is an operation that timed out (forked workers that
    # shared write ids waited out OP_TIMEOUT_S this way)
    killed = {int(f.detail.split()[1]) for f in workload.faults if f.kind == "kill -9"}
    stuck = [op for op in stats.ops if not op.known and op.process not in killed]
    assert not stuck, f"operations of live workers ended without an outcome: {stuck[:5]}"


def test_blind_writes_and_latest_reads_under_kill_9_are_linearizable(
    pulsar_endpoint: PulsarEndpoint,
    client: pulsar.Client,
    tmp_path: Path,
    fault_scale: FaultScale,
    fault_report: FaultReport,
) -> None:
    """Puts (each a value no other put uses) and latest reads from writers
    that take the topic from each other and are killed with -9. Puts are
    blind writes, grouped into shared entries and completed at their ack;
    the other runs do read-modify-writes."""
    topic = unique_topic("lin-puts")
    _seed_register(client, topic, pulsar_endpoint.admin_url, KEYS)
    workload = Workload(
        service_url=pulsar_endpoint.service_url,
        admin_url=pulsar_endpoint.admin_url,
        topic=topic,
        key=KEY,
        keys=KEYS,
        workdir=tmp_path,
        workers=fault_scale.workers,
        seconds=fault_scale.seconds,
        seed=3,
        ops=("read", "write"),
    )
    workload.run_with(_killer(fault_scale, random.Random(3)))
    killed = {int(f.detail.split()[1]) for f in workload.faults if f.kind == "kill -9"}
    assert killed, "the nemesis killed nobody"
    for process, code in workload.exit_codes().items():
        if process not in killed:
            assert code == 0, f"worker {process} exited {code}:\n{workload.worker_log(process)}"
    stats = load_history(workload.workdir)
    for key in KEYS:
        per_key = load_history(workload.workdir, key)
        assert sum(op.kind == "write" and op.known for op in per_key.ops) > 5, key
    failures = _per_key_failures(client, pulsar_endpoint.admin_url, workload)
    stuck = [op for op in stats.ops if not op.known and op.process not in killed]
    fault_report.add(
        test="kill -9, blind puts and latest reads (3 keys)",
        ops=len(stats.ops) + len(KEYS),
        ok=stats.ok + len(KEYS),
        unknown=stats.unknown,
        failed=stats.failed,
        faults=f"{len(killed)}x kill -9",
        takeovers=count_takeovers(client, topic),
        violations=len(failures),
        lost="- (a lost put is a violation)",
        recovery="-",
    )
    assert not failures, failures
    assert not stuck, f"operations of live workers ended without an outcome: {stuck[:5]}"


def _pauser(
    endpoint: PulsarEndpoint, pause_s: float, rng: random.Random
) -> Callable[[Workload], None]:
    """A nemesis: freeze the broker (SIGSTOP) for ``pause_s``, longer than the
    workers' send timeout, every few seconds until five seconds before the
    end. Every publish in flight meanwhile is in doubt: not acknowledged in
    time, yet stored once the broker resumes."""

    def nemesis(w: Workload) -> None:
        while True:
            time.sleep(rng.uniform(3.0, 6.0))
            if w.elapsed() > w.seconds - 5:
                return
            started = w.elapsed()
            with endpoint.paused():
                time.sleep(pause_s)
            w.faults.append(
                Fault(kind="broker pause", at_s=started, detail=f"SIGSTOP {pause_s:.1f}s")
            )

    return nemesis


def test_reads_and_writes_under_broker_pauses_are_linearizable(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    fault_scale: FaultScale,
    fault_report: FaultReport,
) -> None:
    """Latest reads, CAS, increments and blind puts from processes taking the
    topic from each other, while the broker is frozen past their send timeout
    (2 s frozen, 1.5 s timeout): writes in doubt, settled from the log before
    anything else is built on them (issue #25's lost update: a put in doubt,
    an update built without it on the same producer, both stored). The
    history must be linearizable and no acknowledged increment lost. Runs on
    the private broker of the fencing tests: a paused broker must not stall
    other tests' clients."""
    endpoint: PulsarEndpoint = request.getfixturevalue("fencing_endpoint")
    client = pulsar.Client(
        endpoint.service_url,
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        topic = unique_topic("lin-pause")
        _seed_register(client, topic, endpoint.admin_url, KEYS)
        workload = Workload(
            service_url=endpoint.service_url,
            admin_url=endpoint.admin_url,
            topic=topic,
            key=KEY,
            keys=KEYS,
            workdir=tmp_path,
            workers=fault_scale.workers,
            seconds=fault_scale.seconds,
            seed=5,
            ops=("read", "cas", "incr", "write"),
            send_timeout_s=1.5,
        )
        workload.run_with(_pauser(endpoint, 2.0, random.Random(5)))
        assert any(f.kind == "broker pause" for f in workload.faults), "never paused"
        in_doubt = sum(
            int(line.split(":")[1])
            for process in workload.exit_codes()
            for line in workload.worker_log(process).splitlines()
            if line.startswith("writes in doubt:")
        )
        # the pauses did what they are for: some writes were in doubt
        assert in_doubt > 0, "no write was in doubt: the pauses tested nothing"
        _check_mixed(
            client,
            endpoint.admin_url,
            workload,
            fault_report,
            f"broker paused past the send timeout (SIGSTOP 2 s; {in_doubt} writes in doubt), "
            "3 keys",
        )
    finally:
        client.close()


def _admin_troubler(
    proxy: AdminProxy, fault_scale: FaultScale, rng: random.Random
) -> Callable[[Workload], None]:
    """A nemesis: the admin API answers late (5 s, past the writers' wait for
    the stats that tell them whether another writer waits), then fails every
    call (503), in turns, each for a few seconds; a kill -9 in each turn, so a
    replacement worker opens its map (create, protect, incarnation, reap)
    through the troubled API."""

    def nemesis(w: Workload) -> None:
        turn = 0
        while True:
            time.sleep(rng.uniform(1.0, 3.0))
            if w.elapsed() > w.seconds - 8:
                return
            started = w.elapsed()
            window = proxy.slow(5.0) if turn % 2 == 0 else proxy.failing(503)
            kind = "admin API slow" if turn % 2 == 0 else "admin API failing"
            with window:
                if rng.random() < fault_scale.workers / (fault_scale.kill_every_s + 1):
                    w.kill_random(rng)
                time.sleep(rng.uniform(3.0, 6.0))
            w.faults.append(
                Fault(
                    kind=kind,
                    at_s=started,
                    detail=f"{w.elapsed() - started:.1f}s",
                )
            )
            turn += 1

    return nemesis


def test_reads_and_writes_under_a_slow_and_failing_admin_api_are_linearizable(
    pulsar_endpoint: PulsarEndpoint,
    client: pulsar.Client,
    tmp_path: Path,
    fault_scale: FaultScale,
    fault_report: FaultReport,
) -> None:
    """Latest reads, CAS, increments and blind puts from processes taking the
    topic from each other while their admin API (a proxy in front of the
    broker's) answers late or not at all, and workers are killed and replaced
    meanwhile (issue #25: a slow admin API is one of the faults that found
    its defects). The admin API is advice to the write path (is another writer
    waiting?) and a step of opening a map; neither may cost a guarantee: the
    history must be linearizable, no acknowledged increment lost, and every
    live worker's operation must end with an outcome."""
    topic = unique_topic("lin-admin")
    _seed_register(client, topic, pulsar_endpoint.admin_url, KEYS)
    proxy = AdminProxy(pulsar_endpoint.admin_url)
    try:
        workload = Workload(
            service_url=pulsar_endpoint.service_url,
            admin_url=proxy.url,
            topic=topic,
            key=KEY,
            keys=KEYS,
            workdir=tmp_path,
            workers=fault_scale.workers,
            seconds=max(30.0, fault_scale.seconds),
            seed=7,
            ops=("read", "cas", "incr", "write"),
        )
        workload.run_with(_admin_troubler(proxy, fault_scale, random.Random(7)))
    finally:
        proxy.close()
    kinds = {f.kind for f in workload.faults}
    assert {"admin API slow", "admin API failing"} <= kinds, f"faults injected: {kinds}"
    # the faults were met, not only configured
    assert proxy.delayed > 0, "no admin call was delayed"
    assert proxy.failed > 0, "no admin call failed"
    _check_mixed(
        client,
        pulsar_endpoint.admin_url,
        workload,
        fault_report,
        f"admin API slow (5 s) and failing (503) in turns, workers killed meanwhile "
        f"({proxy.delayed} calls delayed, {proxy.failed} failed), 3 keys",
    )


def _check_mixed(
    client: pulsar.Client,
    admin_url: str,
    workload: Workload,
    report: FaultReport,
    test: str,
) -> None:
    """Each key's history (CAS, increments, unique puts, latest reads) and a
    final latest read by a fresh map: linearizable. Every operation of a
    worker that was not killed ended with an outcome."""
    killed = {int(f.detail.split()[1]) for f in workload.faults if f.kind == "kill -9"}
    for process, code in workload.exit_codes().items():
        if process not in killed:
            assert code == 0, f"worker {process} exited {code}:\n{workload.worker_log(process)}"
    stats = load_history(workload.workdir)
    failures = _per_key_failures(client, admin_url, workload)
    report.add(
        test=test,
        ops=len(stats.ops) + len(KEYS),
        ok=stats.ok + len(KEYS),
        unknown=stats.unknown,
        failed=stats.failed,
        faults=", ".join(
            sorted(
                {
                    f"{sum(x.kind == f.kind for x in workload.faults)}x {f.kind}"
                    for f in workload.faults
                }
            )
        ),
        takeovers=count_takeovers(client, workload.topic),
        violations=len(failures),
        lost="- (a lost write is a violation)",
        recovery="-",
    )
    assert not failures, failures
    stuck = [op for op in stats.ops if not op.known and op.process not in killed]
    assert not stuck, f"operations of live workers ended without an outcome: {stuck[:5]}"
    assert stats.ok > 20, "too few operations completed to mean anything"


@pytest.mark.fault
def test_clients_ride_through_a_broker_restart_linearizably(
    pulsar_endpoint: PulsarEndpoint,
    client: pulsar.Client,
    tmp_path: Path,
    fault_scale: FaultScale,
    fault_report: FaultReport,
) -> None:
    if not pulsar_endpoint.can_restart:
        pytest.skip(f"cannot restart a {pulsar_endpoint.kind} broker")
    topic = unique_topic("lin-restart")
    _seed_register(client, topic, pulsar_endpoint.admin_url)
    workload = Workload(
        service_url=pulsar_endpoint.service_url,
        admin_url=pulsar_endpoint.admin_url,
        topic=topic,
        key=KEY,
        workdir=tmp_path,
        workers=fault_scale.workers,
        seconds=max(40.0, fault_scale.seconds),
        seed=2,
    )
    restarts: list[tuple[Fault, float]] = []

    def nemesis(w: Workload) -> None:
        time.sleep(w.seconds / 3)
        fault = Fault("broker restart", w.elapsed())
        begun = time.monotonic_ns() / 1e9
        pulsar_endpoint.restart()
        up = time.monotonic_ns() / 1e9
        fault.detail = f"broker down/up in {up - begun:.1f}s"
        w.faults.append(fault)
        restarts.append((fault, up))

    workload.run_with(nemesis)
    stats = load_history(tmp_path)
    for fault, up in restarts:
        fault.recovery_s = first_success_after(stats, up)
        assert fault.recovery_s is not None, "no operation completed after the restart"
    _check(client, pulsar_endpoint.admin_url, workload, fault_report, "broker restart")


def _per_key_failures(client: pulsar.Client, admin_url: str, workload: Workload) -> list[str]:
    """Each key's history plus a final latest read by a fresh map, checked on
    its own (linearizability is local); the keys whose history is not."""
    failures = []
    with PulsarMap[str, int](client, workload.topic, admin_url=admin_url) as fresh:
        for key in KEYS:
            per_key = load_history(workload.workdir, key)
            call = time.monotonic_ns() / 1e9
            final = fresh.get(key, latest=True).result(60)
            read = Op(-1, "read", None, final, call, time.monotonic_ns() / 1e9)
            result = check_register([*per_key.ops, read], initial=0)
            if not result.ok:
                failures.append(f"{key}: longest linearizable prefix {result.longest_prefix}")
    return failures
