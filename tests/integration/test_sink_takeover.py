"""The SQL sink when its active instance is killed, again and again (issue #26, item 4).

Two instances of one sink on a one-partition input (a failover subscription:
one of them active, the other waiting): 2,000 records in 8 rounds; each round
SIGKILLs the active instance and at once sends 250 records as fast as the
producer takes them (one record an entry, or batches of up to 10, round by
round), then starts the killed instance again. Every record must
end as its row: none lost; rows are keyed, so none is there twice, and each
row holds the position of the one record of its key.

What the kill can lose: the broker still dispatches the burst's first records
to the killed instance until it notices the closed connection, then hands the
partition to the other one. When a dispatch's completion runs after that
switch, the broker reads for the new consumer from its read position, after
the records the dead one got; those come back only when the cursor is rewound,
a second later. Today's sink wrote the newer record first and then skipped the
older ones as already written: seen here with the sink before the fix, the
instance taking over wrote 59:1342 over 59:1199 and 59:1200-1341 were skipped,
142 records lost. It is a race (that run lost records at one of its five
kills; most runs lose none), so the rounds are built to give it its chance: the
active instance idle (its consumer waiting for entries), the burst sent right
after the kill. ``tests/unit/test_sink_takeover_gap.py`` replays that delivery
order deterministically.

An instance that exits on its own is started again, as the worker restarts
one, and reported: a runner can exit at its start with SQLite's "database is
locked" (``PRAGMA journal_mode=WAL`` while the other instance writes), a fault
of its own, outside what this test is about.

The instances run in child processes of the test, started with
``multiprocessing`` (``spawn`` and ``fork``): ``SinkFunction`` inside the
distribution's Python function runtime (``python_instance_main``, as the
functions worker runs an instance of a sink deployed with
``--retain-ordering --parallelism 2``), and the runner (``pulsar-state sink
run`` without a group: a failover subscription on the whole topic).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_name, wait_until
from postgres_server import free_port
from sink_instances import (
    consumer_pid,
    function_instance,
    python_instance_dir,
    runner_instance,
    sink_function_details,
)
from stacks import dump_stacks

from pulsar_state.connectors.sink import SqlUpsertSink
from pulsar_state.position import Position

#: records sent in all, and the rounds (one kill each) they are sent in
RECORDS = 2000
KILLS = 8


class _Instances:
    """Two sink instances in child processes; a killed one is started again, and so is
    one that exits on its own (as the worker restarts an instance), counted."""

    def __init__(self, start: Callable[[int], BaseProcess]) -> None:
        self._start = start
        self.procs: dict[int, BaseProcess] = {}
        #: (instance, exit code) of each exit the test did not cause
        self.exits: list[tuple[int, int | None]] = []

    def start(self, index: int) -> None:
        self.procs[index] = self._start(index)

    def restart_exited(self) -> None:
        for index, proc in list(self.procs.items()):
            if proc.exitcode is not None:
                self.exits.append((index, proc.exitcode))
                self.start(index)

    def pids(self) -> dict[int, int]:
        return {i: p.pid for i, p in self.procs.items() if p.pid is not None and p.is_alive()}

    def kill(self, index: int) -> None:
        proc = self.procs[index]
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)

    def reap(self, index: int) -> None:
        self.procs[index].join(timeout=30)

    def describe(self, log_dir: Path) -> str:
        """Each instance's process: its exit code, or the stacks of its threads."""
        lines = []
        for index, proc in sorted(self.procs.items()):
            if proc.is_alive() and proc.pid is not None:
                lines.append(
                    f"instance {index} (pid {proc.pid}) alive:\n" + dump_stacks(proc.pid, log_dir)
                )
            else:
                lines.append(f"instance {index} (pid {proc.pid}) exited {proc.exitcode}")
        return "\n".join(lines)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.join(timeout=30)


def _subscription_stats(endpoint: PulsarEndpoint, partition: str, subscription: str) -> Any:
    path = partition.removeprefix("persistent://")
    stats = endpoint.admin("GET", f"/admin/v2/persistent/{path}/stats")
    stats.raise_for_status()
    return stats.json()["subscriptions"].get(subscription)


def _active_instance(
    endpoint: PulsarEndpoint, partition: str, subscription: str, instances: _Instances
) -> tuple[int] | None:
    """``(index,)`` of the instance whose consumer is the active one, once both are
    connected (the other waits)."""
    sub = _subscription_stats(endpoint, partition, subscription)
    if sub is None or len(sub.get("consumers", [])) != 2:
        return None
    active = sub.get("activeConsumerName")
    address = next(
        (c.get("address") for c in sub["consumers"] if c.get("consumerName") == active), None
    )
    if not address:
        return None
    pids = instances.pids()
    pid = consumer_pid(address, list(pids.values()))
    index = next((i for i, p in pids.items() if p == pid), None)
    return None if index is None else (index,)


def _table(database: str) -> tuple[dict[str, tuple[str, str]], Position | None]:
    """``key -> (value, position)`` of the sink's table, and the position stored."""
    probe = SqlUpsertSink()
    probe.open({"database": database, "table": "kv"})
    try:
        with probe.backend.transaction(None) as cur:
            cur.execute("SELECT key, value, position FROM kv")
            rows = {str(k): (str(v), str(p)) for k, v, p in cur.fetchall()}
            cur.execute("SELECT ledger, entry, batch FROM _pss_positions")
            stored = [Position(int(a), int(b), int(c)) for a, b, c in cur.fetchall()]
    finally:
        probe.close()
    return rows, (stored[0] if stored else None)


def _ranges(positions: list[Position]) -> str:
    """``ledger:first-last`` runs of entry ids, for a failure message."""
    runs: list[list[Position]] = []
    for p in sorted(positions):
        if runs and runs[-1][-1].ledger == p.ledger and p.entry == runs[-1][-1].entry + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    return ", ".join(f"{r[0].ledger}:{r[0].entry}-{r[-1].entry}" for r in runs)


def _burst(producer: pulsar.Producer, first: int, n: int) -> dict[str, tuple[str, str]]:
    """``n`` records with keys of their own, sent without waiting between them."""
    futures: list[tuple[str, str, Future[Any]]] = []
    for i in range(first, first + n):
        key, value = f"k{i:05d}", f"v{i}"
        done: Future[Any] = Future()
        producer.send_async(
            value.encode(),
            lambda res, msg_id, done=done: done.set_result((res, msg_id)),
            partition_key=key,
        )
        futures.append((key, value, done))
    sent = {}
    for key, value, done in futures:
        res, msg_id = done.result(timeout=60)
        assert res == pulsar.Result.Ok, res
        sent[key] = (value, str(Position.from_message_id(msg_id)))
    return sent


@pytest.mark.timeout(900)
@pytest.mark.parametrize("start_method", ["spawn", "fork"])
@pytest.mark.parametrize("kind", ["function", "runner"])
def test_no_record_is_lost_when_the_active_instance_is_killed(
    pulsar_endpoint: PulsarEndpoint,
    client: pulsar.Client,
    tmp_path: Path,
    kind: str,
    start_method: str,
) -> None:
    if kind == "function" and not python_instance_dir().is_dir():
        pytest.skip("needs the Pulsar distribution's Python function runtime (in the cache)")
    name = unique_name("sinktakeover")
    topic = f"persistent://public/default/{name}-in"
    partition = f"{topic}-partition-0"
    created = pulsar_endpoint.admin(
        "PUT", f"/admin/v2/persistent/public/default/{name}-in/partitions", json=1
    )
    assert created.status_code in (200, 204), created.text
    database = str(tmp_path / "sink.db")
    logs = tmp_path / "logs"
    logs.mkdir()
    ctx = multiprocessing.get_context(start_method)
    if kind == "function":
        subscription = f"public/default/{name}"  # the functions runtime's default
        details = sink_function_details(
            name=name,
            topic=topic,
            user_config={
                "database": database,
                "table": "kv",
                "adminUrl": pulsar_endpoint.admin_url,
            },
        )

        def start(index: int) -> BaseProcess:
            proc = ctx.Process(
                target=function_instance,
                args=(pulsar_endpoint.service_url, details),
                kwargs={
                    "instance_id": index,
                    "port": free_port(),
                    "metrics_port": free_port(),
                    "log_dir": str(logs),
                },
                daemon=True,
            )
            proc.start()
            return proc

    else:
        subscription = "sink"
        config = {
            "serviceUrl": pulsar_endpoint.service_url,
            "adminUrl": pulsar_endpoint.admin_url,
            "topic": topic,
            "subscription": subscription,
            "database": database,
            "table": "kv",
            "name": name,
        }

        def start(index: int) -> BaseProcess:
            proc = ctx.Process(
                target=runner_instance,
                args=(config, str(logs / f"runner-{index}.log")),
                daemon=True,
            )
            proc.start()
            return proc

    instances = _Instances(start)
    # rounds alternate: one record an entry, then batches of up to 10 (a batch's
    # rest after a takeover is waited for by its size, stored with the position)
    producers = [
        client.create_producer(topic, batching_enabled=False, max_pending_messages=5000),
        client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=10,
            batching_max_publish_delay_ms=5,
            max_pending_messages=5000,
        ),
    ]
    sent: dict[str, tuple[str, str]] = {}
    last: list[Position] = []
    kills: list[tuple[int, int]] = []  # (records sent before, instance)
    try:
        instances.start(0)
        instances.start(1)
        per_round = RECORDS // KILLS
        for round_ in range(KILLS):
            try:
                (active,) = wait_until(
                    lambda: (
                        instances.restart_exited()
                        or _active_instance(pulsar_endpoint, partition, subscription, instances)
                    ),
                    timeout_s=120,
                    interval_s=0.2,
                    message="both instances connected, the active one known",
                )
            except AssertionError as exc:
                stats = _subscription_stats(pulsar_endpoint, partition, subscription)
                raise AssertionError(
                    f"{exc}; consumers {stats and stats.get('consumers')}\n"
                    + instances.describe(logs)
                ) from None
            # the active instance idle, its consumer waiting: the burst is dispatched
            # to it while the broker has not noticed the kill yet
            wait_until(
                lambda: not last or _table(database)[1] == last[-1],
                timeout_s=120,
                interval_s=0.2,
                message="the records sent so far handled",
            )
            kills.append((len(sent), active))
            instances.kill(active)
            burst = _burst(producers[round_ % 2], len(sent), per_round)
            sent.update(burst)
            last.append(Position.parse(list(burst.values())[-1][1]))
            instances.reap(active)
            instances.start(active)  # as the worker does: the instance comes back
        assert len(sent) == RECORDS

        def settled() -> bool:
            return _table(database)[0] == sent

        try:
            wait_until(settled, timeout_s=240, interval_s=1, message="every record in the table")
        except AssertionError:
            rows, stored = _table(database)
            lost = [Position.parse(p) for k, (_, p) in sent.items() if k not in rows]
            wrong = [(k, rows[k], sent[k]) for k in rows if k in sent and rows[k] != sent[k]]
            raise AssertionError(
                f"{len(lost)} of {RECORDS} records lost ({_ranges(lost)}), stored position "
                f"{stored}; kills (records sent before, instance): {kills}; rows differing "
                f"{wrong[:5]}; rows of no record {sorted(set(rows) - set(sent))[:5]}"
            ) from None
        print(
            f"{kind}/{start_method}: {RECORDS} records, kills {kills}: none lost "
            f"(instances that exited on their own and were started again: {instances.exits})"
        )
    except BaseException:
        for log in sorted(logs.rglob("*.log")):
            print(f"--- {log.name}\n{log.read_text()[-6000:]}")
        raise
    finally:
        instances.close()
        for producer in producers:
            producer.close()
