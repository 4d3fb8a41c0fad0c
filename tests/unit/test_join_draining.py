"""``harness.join_draining``: a child that filled its queue's pipe exits once the parent reads.

The cluster tier's bookie test joined its writer processes without reading
their outcome queue; a writer with more than a pipe's worth of outcomes not
yet read could not exit, and the join timed out with it alive (CI, stop 34).
"""

from __future__ import annotations

import multiprocessing
import queue
from typing import Any

from harness import join_draining

#: outcomes of about 60 bytes each: several times the 64 KiB of a pipe
ITEMS = 10_000


def put_many(outcomes: Any) -> None:
    for i in range(ITEMS):
        outcomes.put((i % 2, "ok", i, float(i)))


def test_a_child_with_a_full_pipe_exits_when_drained() -> None:
    ctx = multiprocessing.get_context("spawn")
    outcomes = ctx.Queue()
    child = ctx.Process(target=put_many, args=(outcomes,), daemon=True)
    child.start()
    seen: list[Any] = []

    def drain() -> None:
        while True:
            try:
                seen.append(outcomes.get_nowait())
            except queue.Empty:
                return

    try:
        # the pitfall itself: without a reader the child cannot exit
        child.join(3)
        assert child.is_alive(), "the child exited with its items still unread"
        join_draining([child], drain, timeout_s=120)
        assert child.exitcode == 0
        assert len(seen) == ITEMS
    finally:
        if child.is_alive():
            child.kill()
