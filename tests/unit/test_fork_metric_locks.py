"""A metric lock held in the parent at a fork is free in the child (issue #25, defect 10's kin).

The tail counts every write it applies (``inc`` under the value's lock), the
writer labels its series (``labels()`` under the metric's lock): a fork at
that moment copied the lock held into the child, whose first use of the same
series then waited forever. Here another thread of the parent holds the lock
at the fork (so that a re-entrant lock, as prometheus-client 0.21.0 has, is
held by a thread that does not exist in the child).
"""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import pytest

from pulsar_state import metrics

#: a child that does not come back within this has hung (it takes milliseconds)
_CHILD_BOUND_S = 60.0


def _count_once(topic: str) -> None:
    metrics.WRITES.labels(topic).inc()


@pytest.mark.parametrize("held", ["value", "labels"])
def test_a_metric_lock_held_at_the_fork_is_free_in_the_child(held: str) -> None:
    topic = f"fork-{held}"
    series = metrics.WRITES.labels(topic)
    lock: Any = series._value._lock if held == "value" else metrics.WRITES._lock
    ctx = multiprocessing.get_context("fork")
    holding, forked = threading.Event(), threading.Event()

    def hold() -> None:  # another thread of the parent, inside the lock at the fork
        with lock:
            holding.set()
            forked.wait(_CHILD_BOUND_S)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(_CHILD_BOUND_S)
    child = ctx.Process(target=_count_once, args=(topic,))
    child.start()
    forked.set()
    holder.join()
    child.join(_CHILD_BOUND_S)
    hung = child.is_alive()
    if hung:
        child.kill()
        child.join(5)
    assert not hung, f"the child waited on the {held} lock the parent held at the fork"
    assert child.exitcode == 0
