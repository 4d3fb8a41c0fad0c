"""When a manager's accelerator takes a checkpoint: on demand, and when one is due.

The accelerator (:mod:`pulsar_state.core.accelerator`; the map's columnar
checkpoints implement it) decides *whether* one is due and writes it; this
module decides *when* to ask, with the state lock held while the state is
handed over:

* on demand (``SharedStateManager.checkpoint``): after local state caught up;
  while an automatic one is being written, a fresh one is taken once it ends,
  so the checkpoint returned covers every write acknowledged before the call;
* automatically, after each publish (on the writer thread): a cheap unlocked
  check first (most publishes stop there), then the real one under the lock.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Generic, TypeVar, cast

from pulsar_state.core import futures
from pulsar_state.core.accelerator import Checkpoint, Checkpoints
from pulsar_state.core.log.tailer import Tailer

__all__ = ["CheckpointTrigger"]

S = TypeVar("S")


class CheckpointTrigger(Generic[S]):
    """Asks ``checkpointer`` for checkpoints of ``tailer``'s state."""

    def __init__(self, checkpointer: Checkpoints[S], tailer: Tailer[S, Any]) -> None:
        self._checkpointer = checkpointer
        self._tailer = tailer
        checkpointer.counting_from(tailer.applied)  # its count of applied ops starts here

    def take(self) -> Future[Checkpoint]:
        """A checkpoint of the state as applied now (the caller caught up first)."""
        with self._tailer.lock:
            running = self._checkpointer.running
            if running is None:
                # not automatic: always written, so its future gives a Manifest
                return cast("Future[Checkpoint]", self._take_locked())
        result: Future[Checkpoint] = Future()

        def after_running(_done: Future[Any]) -> None:
            # the running one may predate this call: take a fresh one
            try:
                futures.chain(self.take(), result)
            except BaseException as exc:  # e.g. closed meanwhile
                futures.set_exception(result, exc)

        running.add_done_callback(after_running)
        return result

    def after_publish(self) -> None:
        """After each publish (writer thread): a checkpoint when one is due."""
        tailer = self._tailer
        # unlocked first (ints, a racy read is harmless): most publishes stop here
        if not self._checkpointer.due(tailer.applied_ops, tailer.state):
            return
        with tailer.lock:
            if self._checkpointer.due(tailer.applied_ops, tailer.state):
                self._take_locked(automatic=True)

    def _take_locked(self, *, automatic: bool = False) -> Future[Any]:
        """Start a checkpoint of the state as applied now (under the state lock);
        an ``automatic`` one is not written if another holder's is newer."""
        tailer = self._tailer
        return self._checkpointer.take(
            tailer.state,
            tailer.applied,
            tailer.epoch,
            tailer.stale_keys,
            tailer.applied_ops,
            automatic=automatic,
        )
