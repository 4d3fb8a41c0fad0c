"""Identities made by the state core differ between a process and its forked child."""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection

from pulsar_state.core.write.request import new_write_id


def _write_ids(count: int) -> list[str]:
    return [new_write_id() for _ in range(count)]


def _child(conn: Connection) -> None:
    conn.send(_write_ids(3))
    conn.close()


def test_a_forked_child_makes_write_ids_of_its_own() -> None:
    before = _write_ids(2)  # the parent has made ids before it forks
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(sender,))
    child.start()
    sender.close()
    assert receiver.poll(30), "the forked child sent no write ids within 30s"
    in_child = receiver.recv()
    child.join(30)
    assert child.exitcode == 0
    after = _write_ids(3)  # the parent goes on with its own counter

    parent_prefixes = {i.rsplit("-", 1)[0] for i in before + after}
    child_prefixes = {i.rsplit("-", 1)[0] for i in in_child}
    assert len(parent_prefixes) == 1 and len(child_prefixes) == 1
    assert parent_prefixes != child_prefixes, "the child reuses its parent's process id"
    assert not set(in_child) & set(after), f"the same write ids: {in_child} and {after}"
    assert len(set(before + after)) == 5 and len(set(in_child)) == 3
