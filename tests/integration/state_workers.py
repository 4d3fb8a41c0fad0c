"""Code run in separate processes by the state core's tests (any start method)."""

from __future__ import annotations

import faulthandler
import gc
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import pulsar

from pulsar_state import CoordinationService, MetadataStore, PulsarMap


def increment_worker(
    service_url: str,
    admin_url: str,
    topic: str,
    key: str,
    times: int,
    *,
    op_timeout_s: float = 120.0,
) -> int:
    """Open a map in this process (its own client) and increment ``key`` ``times`` times."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        with PulsarMap[str, int](client, topic, admin_url=admin_url) as m:
            for _ in range(times):
                m.update(key, lambda v: (v or 0) + 1).result(timeout=op_timeout_s)
            return times
    finally:
        client.close()


def counter_worker(
    service_url: str, admin_url: str, topic: str, path: str, times: int
) -> list[int]:
    """Take ``times`` values from a metadata counter in this process."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        with MetadataStore(client, topic, admin_url=admin_url) as store:
            service: CoordinationService[int] = CoordinationService(store)
            values = [service.get_next_counter_value(path).result(120) for _ in range(times)]
            service.close()
            return values
    finally:
        client.close()


def try_inherited(
    calls: dict[str, Callable[[], Any]], conn: Connection, hang_s: float = 25.0
) -> None:
    """In a forked child: run each call on objects made by the parent; report what
    each raised (class name, message, and where: ``"call"`` when the call itself
    raised, ``"future"`` when the future it returned failed, ``"returned"`` when
    nothing failed) through ``conn``.

    A call that returns a future is waited on for at most 10 s, so that a call
    that does not fail at once shows up as a timeout, not as a hang of the test;
    after ``hang_s`` the child dumps its threads' stacks and exits.
    """
    # a hang shows where: every thread's stack on stderr, then the child exits
    faulthandler.dump_traceback_later(hang_s, exit=True)
    outcomes: dict[str, tuple[str, str, str]] = {}
    for name, call in calls.items():
        where = "call"
        try:
            result = call()
            if hasattr(result, "result"):
                where = "future"
                result = result.result(timeout=10)
        except BaseException as exc:
            outcomes[name] = (type(exc).__name__, str(exc), where)
        else:
            outcomes[name] = ("returned", repr(result)[:200], "returned")
        conn.send({name: outcomes[name]})
    conn.send(None)
    conn.close()
    faulthandler.cancel_dump_traceback_later()


def collect_then_use_a_map(service_url: str, admin_url: str, topic: str) -> None:
    """A forked child's first steps: a full garbage collection (which meets what
    the parent left in reference cycles), then a client and a map of its own.
    Exits 0 when the map reads the parent's value."""
    gc.collect()
    client = pulsar.Client(
        service_url,
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    m = PulsarMap[str, int](client, topic, admin_url=admin_url)
    try:
        if m.get("k", latest=True).result(30) != 1:
            raise SystemExit(3)
        m.update("children", lambda v: (v or 0) + 1).result(30)
    finally:
        m.close()
        client.close()
