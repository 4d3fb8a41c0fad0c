"""Repairs: re-asserting the current value of keys a stale write touched.

A stale write (one that landed after another writer's epoch marker) is skipped
by every reader, but compaction keeps the last message of each key, which may
be that stale one (topic_format, *Compaction safety*). The writer therefore
writes the keys' current values again, at once, as a read-modify-write of its
own, ahead of everything queued.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from pulsar_state.core.callback_thread import CallbackFuture, CallbackThread
from pulsar_state.core.log.tailer import Tailer
from pulsar_state.core.op_codec import OpCodec
from pulsar_state.core.write.request import WriteRequest

__all__ = ["repair_request"]

log = logging.getLogger(__name__)

S = TypeVar("S")
Op = TypeVar("Op")


def repair_request(
    codec: OpCodec[Op],
    tailer: Tailer[S, Op],
    callbacks: CallbackThread,
    on_end: Callable[[], None],
) -> WriteRequest[S, Op] | None:
    """The write that repairs the keys stale writes touched so far, or ``None``
    (nothing to repair, or a codec that cannot). ``on_end()`` runs once it is
    done, whether it succeeded or not; on success the keys it covered are
    forgotten (unless touched again meanwhile)."""
    repair = getattr(codec, "repair", None)
    if repair is None:
        return None
    with tailer.lock:
        keys = dict(tailer.stale_keys)
    if not keys:
        return None
    request: WriteRequest[S, Op] = WriteRequest(
        lambda state: repair(state, set(keys)), False, CallbackFuture(callbacks)
    )
    log.info("repairing %d keys a stale write touched on %s", len(keys), tailer.topic)

    def repaired(done: Any) -> None:
        on_end()
        if done.exception() is None:
            tailer.repaired(keys, done.result())
        else:
            log.warning("repair of %s failed: %s", tailer.topic, done.exception())

    request.future.add_inline_callback(repaired)
    return request
