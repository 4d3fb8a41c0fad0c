"""Fork safety: processes started after ``import pulsar_state`` (gunicorn --preload,
Celery prefork, multiprocessing's fork start method, Spark's forked Python workers).

Each process has its own identities (write ids), so contended writers from forked
processes lose nothing and do not hang; and an object made in the parent (a map,
a manager, a client the parent already used) fails at once in a forked child
with :class:`~pulsar_state.ForkedProcessError` instead of hanging.
"""

from __future__ import annotations

import functools
import gc
import multiprocessing
import time
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_topic
from state_workers import collect_then_use_a_map, increment_worker, try_inherited

from pulsar_state import ForkedProcessError, MetadataStore, PulsarMap, StateClosedError

ClientFactory = Callable[[], pulsar.Client]

#: the whole contended run, start to finish (spawn needs a few seconds)
RUN_BOUND_S = 120.0
#: a forked child's calls on inherited objects: each must fail at once
CHILD_BOUND_S = 30.0


@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_processes_incrementing_one_key_lose_nothing_under_every_start_method(
    pulsar_endpoint: PulsarEndpoint, make_client: ClientFactory, start_method: str
) -> None:
    topic = unique_topic(f"incr-{start_method}")
    workers, times = 4, 25
    # like gunicorn --preload: the parent has imported pulsar_state and holds a
    # live client and map when the workers are forked
    with PulsarMap[str, int](
        make_client(), unique_topic("parent"), admin_url=pulsar_endpoint.admin_url
    ) as parents_map:
        parents_map.put("alive", 1).result(30)
        ctx = multiprocessing.get_context(start_method)
        gc.collect()  # see _run_in_forked_child
        started = time.monotonic()
        with ctx.Pool(workers) as pool:
            pending = pool.starmap_async(
                functools.partial(increment_worker, op_timeout_s=60),
                [
                    (pulsar_endpoint.service_url, pulsar_endpoint.admin_url, topic, "n", times)
                    for _ in range(workers)
                ],
            )
            try:
                results = pending.get(timeout=RUN_BOUND_S)
            except multiprocessing.TimeoutError:
                pool.terminate()
                pytest.fail(
                    f"{workers} {start_method} workers did not finish {times} increments each "
                    f"within {RUN_BOUND_S:.0f}s"
                )
        elapsed = time.monotonic() - started
        assert sum(results) == workers * times
        # the parent's own map still works after its children came and went
        assert parents_map.update("alive", lambda v: (v or 0) + 1).result(30) == 2
    m = PulsarMap[str, int](make_client(), topic, admin_url=pulsar_endpoint.admin_url)
    try:
        assert m.get("n", latest=True).result(30) == workers * times
    finally:
        m.close()
    print(f"{start_method}: {workers}x{times} increments in {elapsed:.1f}s")


def _run_in_forked_child(calls: dict[str, Callable[[], Any]]) -> dict[str, tuple[str, str, str]]:
    """Run ``calls`` in a forked child; what each raised, or fail if the child hangs."""
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    # a pulsar.Client closed in the parent (earlier tests' clients) but not yet
    # garbage-collected hangs the child that collects it (its C++ destructor
    # waits on the parent's threads): collect it here, before forking
    gc.collect()
    child = ctx.Process(target=try_inherited, args=(calls, sender))
    child.start()
    sender.close()
    outcomes: dict[str, tuple[str, str, str]] = {}
    deadline = time.monotonic() + CHILD_BOUND_S
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not receiver.poll(remaining):
                pytest.fail(
                    f"the forked child hung: no answer within {CHILD_BOUND_S:.0f}s; "
                    f"it reported {outcomes} before"
                )
            try:
                item = receiver.recv()
            except EOFError:
                pytest.fail(
                    f"the forked child died (exit {child.exitcode}); it reported {outcomes}"
                )
            if item is None:
                break
            outcomes.update(item)
        child.join(CHILD_BOUND_S)
        assert child.exitcode == 0, f"the forked child exited {child.exitcode}"
    finally:
        if child.is_alive():
            child.kill()
            child.join(5)
    return outcomes


def test_a_map_made_before_fork_fails_at_once_in_the_child(
    pulsar_endpoint: PulsarEndpoint, make_client: ClientFactory
) -> None:
    topic = unique_topic("inherited")
    m = PulsarMap[str, int](make_client(), topic, admin_url=pulsar_endpoint.admin_url)
    try:
        m.put("k", 1).result(30)
        outcomes = _run_in_forked_child(
            {
                "get": lambda: m.get("k"),
                "get latest": lambda: m.get("k", latest=True),
                "put": lambda: m.put("k", 2),
                "update": lambda: m.update("k", lambda v: (v or 0) + 1),
                "manager.read": lambda: m.manager.read(len),
                "manager.write": lambda: m.manager.write(lambda s: []),
                "close": m.close,
            }
        )
        for call, (kind, message, where) in outcomes.items():
            assert kind == "ForkedProcessError", f"{call}: {kind}: {message}"
            assert "fork" in message and "in this process" in message, message
            # at the call, before anything is sent or waited for (not through a future)
            assert where == "call", f"{call} failed through its {where}"
        assert issubclass(ForkedProcessError, StateClosedError)
        # the child touched nothing of the parent's: the parent's map still works
        assert m.update("k", lambda v: (v or 0) + 1).result(30) == 2
        assert m.get("k", latest=True).result(30) == 2
    finally:
        m.close()


def test_a_latest_read_made_before_fork_fails_in_the_child_at_its_first_look(
    pulsar_endpoint: PulsarEndpoint, make_client: ClientFactory
) -> None:
    """A latest read is asked when first looked at: looked at first in a
    forked child, it fails with ForkedProcessError (before, the child asked
    with the parent's consumer and hung); the parent's read still works."""
    topic = unique_topic("inherited-read")
    m = PulsarMap[str, int](make_client(), topic, admin_url=pulsar_endpoint.admin_url)
    try:
        m.put("k", 1).result(30)
        read = m.get("k", latest=True)  # not looked at yet
        outcomes = _run_in_forked_child({"result": lambda: read})
        kind, message, where = outcomes["result"]
        assert (kind, where) == ("ForkedProcessError", "future"), message
        assert read.result(30) == 1
    finally:
        m.close()


def test_a_client_used_before_fork_is_refused_in_the_child(
    pulsar_endpoint: PulsarEndpoint, make_client: ClientFactory
) -> None:
    client = make_client()
    m = PulsarMap[str, int](client, unique_topic("used"), admin_url=pulsar_endpoint.admin_url)
    try:
        m.put("k", 1).result(30)
        other = unique_topic("child")
        outcomes = _run_in_forked_child(
            {
                "new map on the inherited client": lambda: PulsarMap[str, int](
                    client, other, admin_url=pulsar_endpoint.admin_url
                ),
            }
        )
        kind, message, where = outcomes["new map on the inherited client"]
        assert kind == "ForkedProcessError", f"{kind}: {message}"
        assert "pulsar.Client" in message, message
        assert where == "call"
        assert m.get("k", latest=True).result(30) == 1
    finally:
        m.close()


def test_a_metadata_store_made_before_fork_fails_at_once_in_the_child(
    pulsar_endpoint: PulsarEndpoint, make_client: ClientFactory
) -> None:
    store = MetadataStore(
        make_client(), unique_topic("meta-inherited"), admin_url=pulsar_endpoint.admin_url
    )
    try:
        store.put("/a", b"1").result(30)
        outcomes = _run_in_forked_child(
            {
                "get": lambda: store.get("/a"),
                "put": lambda: store.put("/b", b"2"),
                "ephemeral put": lambda: store.put("/e", b"3", ephemeral=True),
                "close": store.close,  # must not touch the parent's session
            }
        )
        for call, (kind, message, where) in outcomes.items():
            assert kind == "ForkedProcessError", f"{call}: {kind}: {message}"
            assert where == "call", f"{call} failed through its {where}"
        # the parent's store, and its session, still work
        store.put("/e", b"4", ephemeral=True).result(30)
        got = store.get("/a", latest=True).result(30)
        assert got is not None and got.value == b"1"
    finally:
        store.close()


def _closed_map_in_a_cycle(service_url: str, admin_url: str, topic: str) -> None:
    """A map and its client, used, closed, and left in a reference cycle (as a
    traceback or a callback holds them): garbage the parent has not collected."""
    client = pulsar.Client(
        service_url,
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    m = PulsarMap[str, int](client, topic, admin_url=admin_url)
    m.put("k", 1).result(30)
    m.close()
    client.close()
    cycle: dict[str, Any] = {"map": m, "client": client}
    cycle["self"] = cycle


def test_children_forked_from_a_parent_holding_maps_do_not_hang_in_gc(
    pulsar_endpoint: PulsarEndpoint, make_client: ClientFactory
) -> None:
    """Defect 10 of issue #25: the parent keeps one map open and left closed
    maps and their clients in reference cycles; it forks workers that each
    make their own client and map. At a child's first garbage collection an
    inherited consumer was destroyed, and its native destructor waited for
    threads that do not exist in the child: 4 of 4 children hung. Every
    child must finish (the parent's Pulsar objects are kept alive there)."""
    admin_url = pulsar_endpoint.admin_url
    topic = unique_topic("forkgc")
    parents_map = PulsarMap[str, int](make_client(), topic, admin_url=admin_url)
    try:
        parents_map.put("k", 1).result(30)
        ctx = multiprocessing.get_context("fork")
        gc.collect()
        gc.disable()  # the cycles below must still be garbage when the children start
        try:
            for i in range(3):
                _closed_map_in_a_cycle(pulsar_endpoint.service_url, admin_url, f"{topic}-{i}")
            children = [
                ctx.Process(
                    target=collect_then_use_a_map,
                    args=(pulsar_endpoint.service_url, admin_url, topic),
                )
                for _ in range(4)
            ]
            for child in children:
                child.start()
        finally:
            gc.enable()
        hung = []
        for child in children:
            child.join(timeout=90)
            if child.is_alive():
                hung.append(child.pid)
                child.kill()
                child.join(10)
        assert not hung, f"{len(hung)} of {len(children)} forked children hung"
        assert [child.exitcode for child in children] == [0] * len(children)
        assert parents_map.get("children", latest=True).result(30) == len(children)
    finally:
        parents_map.close()
