"""A deposed scheduler leader's late assignment never lands after its successor's
(issue #26, item 5).

Two schedulers in processes of their own (spawn and fork). The leader ``a``
reads the members and the function records, and is stopped (SIGSTOP, from
its own test hook) right before it publishes. While it is stopped its session
ends (its session consumer is closed by an unload of the sessions topic, and
the stopped process cannot reconnect): the other members expire it, ``b`` is
elected and publishes an assignment computed on the members it sees (``b``
alone). Then ``a`` is continued and publishes what it computed before the
pause. Its write must never land after ``b``'s: the final assignment is
``b``'s, and a reader of the map sees ``b``'s and nothing after it.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pulsar
import pytest
import requests
from harness import PulsarEndpoint, unique_name, unique_topic, wait_until
from map_changes import instance_entries, replayed, states_by_write
from scheduler_workers import scheduler_process

from pulsar_state import CoordinationService, MetadataStore, PulsarMap
from pulsar_state.cluster.admin import topic_path
from pulsar_state.map.watch import MapChange
from pulsar_state.topic_names import sessions_topic

#: the children's session timeout: the stopped leader is expired this long
#: after its session consumer went (a live member's reconnect takes far less)
SESSION_TIMEOUT_S = 5.0


def _stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[-1].split()[0] == "T"


class _Child:
    """A scheduler process and its two pipes."""

    def __init__(
        self, ctx: Any, endpoint: PulsarEndpoint, topics: tuple[str, str], member: str, root: str
    ) -> None:
        self.member = member
        # Pipe(duplex=False) is (receiving end, sending end)
        child_commands, self.commands = ctx.Pipe(duplex=False)
        self.reports, child_reports = ctx.Pipe(duplex=False)
        self.process = ctx.Process(
            target=scheduler_process,
            args=(
                {
                    "service_url": endpoint.service_url,
                    "admin_url": endpoint.admin_url,
                    "meta_topic": topics[0],
                    "assign_topic": topics[1],
                    "member_id": member,
                    "root": root,
                    "session_timeout_s": SESSION_TIMEOUT_S,
                },
                child_commands,
                child_reports,
            ),
            name=f"scheduler-{member}",
            daemon=True,
        )
        self.process.start()
        self.started = self.expect("started", timeout_s=120)

    def expect(self, what: str, *, timeout_s: float) -> tuple[Any, ...]:
        """The next report (failing if it is not ``what`` or does not come)."""
        reports: Connection = self.reports
        if not reports.poll(timeout_s):
            pytest.fail(f"scheduler {self.member} did not report {what!r} within {timeout_s}s")
        got: tuple[Any, ...] = reports.recv()
        assert got[0] == what, f"scheduler {self.member}: expected {what!r}, got {got!r}"
        return got

    def stop(self) -> None:
        pid = self.process.pid
        if pid is not None and self.process.is_alive():
            os.kill(pid, signal.SIGCONT)
            with suppress(OSError):
                self.commands.send("stop")
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10)


@contextmanager
def _children() -> Iterator[list[_Child]]:
    """The children started in the block, stopped (continued first) at its end."""
    started: list[_Child] = []
    try:
        yield started
    finally:
        for child in started:
            child.stop()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_a_deposed_leaders_late_assignment_never_lands_after_its_successors(
    pulsar_endpoint: PulsarEndpoint, start_method: str
) -> None:
    meta_topic, assign_topic = unique_topic("sched-meta"), unique_topic("sched-assign")
    root = f"/{unique_name('sched')}"
    client = pulsar.Client(
        pulsar_endpoint.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    store = MetadataStore(
        client,
        meta_topic,
        admin_url=pulsar_endpoint.admin_url,
        session_timeout_s=SESSION_TIMEOUT_S,
        session_check_interval_s=0.5,
    )
    view = PulsarMap[str, str](client, assign_topic, admin_url=pulsar_endpoint.admin_url)
    changes: list[MapChange[str, str]] = []
    watch = view.watch(None, changes.append)  # every change from the first, in log order
    coordination: CoordinationService[str] = CoordinationService(store)

    def leader() -> str | None:
        return coordination.read_lock(f"{root}/leader").result(timeout=60)

    def placement() -> dict[str, str]:
        return instance_entries(view.items(latest=True).result(timeout=60))

    def set_function(name: str, parallelism: int) -> None:
        record = json.dumps({"parallelism": parallelism}).encode()
        store.put(f"{root}/functions/public~default~{name}", record).result(timeout=60)

    ctx = multiprocessing.get_context(start_method)
    gc.collect()  # a forked child must not meet the parent's garbage (test_fork_safety.py)
    try:
        with _children() as children:
            a = _Child(ctx, pulsar_endpoint, (meta_topic, assign_topic), "a", root)
            children.append(a)
            wait_until(lambda: leader() == "a", timeout_s=60, message="a leads")
            b = _Child(ctx, pulsar_endpoint, (meta_topic, assign_topic), "b", root)
            children.append(b)
            set_function("f", 4)
            wait_until(
                lambda: sorted(placement().values()) == ["a", "a", "b", "b"],
                timeout_s=60,
                message="a assigned f over a and b",
            )

            # a reads members and records for the next change, and stops before publishing
            a.commands.send("arm")
            a.expect("armed", timeout_s=30)
            set_function("g", 2)
            _, read = a.expect("pausing", timeout_s=60)
            assert sorted(read["members"]) == ["a", "b"], read
            assert a.process.pid is not None
            wait_until(lambda: _stopped(a.process.pid), timeout_s=10, message="a is stopped")

            # a's session ends while it is stopped; b takes over and publishes
            unloaded = requests.put(
                f"{pulsar_endpoint.admin_url}/admin/v2/"
                f"{topic_path(sessions_topic(store.manager.topic))}/unload",
                timeout=60,
            )
            assert unloaded.status_code in (200, 204), unloaded.text
            wait_until(lambda: leader() == "b", timeout_s=60, message="b leads")
            wanted = {f"public/default/f:{i}" for i in range(4)} | {
                f"public/default/g:{i}" for i in range(2)
            }
            successors = dict.fromkeys(sorted(wanted), "b")
            wait_until(
                lambda: placement() == successors,
                timeout_s=60,
                message="b published its assignment (b alone: a's session is gone)",
            )
            now = view.items(latest=True).result(timeout=60)
            wait_until(lambda: replayed(changes) == now, timeout_s=30, message="watch caught up")
            published = len(states_by_write(changes))  # b's write is the last one seen

            # a goes on where it stopped: it publishes what it computed before
            os.kill(a.process.pid, signal.SIGCONT)
            late = a.reports.poll(120) and a.reports.recv()
            assert late and late[0] in ("published", "refused"), late
            time.sleep(2.0)  # anything a's resumption sets off lands meanwhile
            final = placement()
            latest = view.items(latest=True).result(timeout=60)
            wait_until(
                lambda: replayed(changes) == latest,
                timeout_s=30,
                message="the watch saw every change",
            )
            # Pulsar's own TableView reads the topic as it is (a refused write sent nothing)
            table = client.create_table_view(assign_topic)
            try:
                raw: dict[str, str] = {}
                table.for_each(lambda k, v: raw.update({k: json.loads(v)}) if v else None)
            finally:
                table.close()
    finally:
        watch.stop()
        coordination.close()
        view.close()
        store.close()
        client.close()

    assert final == successors, (
        f"the deposed leader's late write ({late}) landed after its successor's: "
        f"the assignment is {final}, b's was {successors}"
    )
    assert instance_entries(raw) == successors, raw
    # what a reader of the map saw, write by write: once b's assignment was
    # there, no later write changed it
    states = states_by_write(changes)
    assert states[published - 1] == successors, states
    assert all(state == successors for state in states[published - 1 :]), states[published - 1 :]
    assert late[0] == "refused" and late[1] == "NotLeaderError", late
