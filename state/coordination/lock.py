"""A lock on a metadata store: an ephemeral node with a fencing token (PIP-45)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from enum import Enum
from typing import TYPE_CHECKING, Generic, TypeVar

from pulsar_state.core import futures
from pulsar_state.errors import (
    BadVersionError,
    NotFoundError,
)
from pulsar_state.metadata.tree import (
    GetResult,
)

if TYPE_CHECKING:
    from pulsar_state.coordination.service import CoordinationService

__all__ = ["LockEvent", "ResourceLock"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class LockEvent(Enum):
    """What a held lock hears (``ResourceLock.add_listener``)."""

    SESSION_LOST = "session_lost"  # the store's session was lost: the node may be gone
    REASSERTED = "reasserted"  # revalidated after the session came back: still held
    LOST = "lost"  # taken, deleted or not re-creatable: no longer held


class ResourceLock(Generic[T]):
    """A held lock. ``lost`` completes when it is no longer held (released or taken).

    Its identity is ``(path, owner, fencing_token)``: the session that made the
    node and the token of that write. Release and loss detection compare both
    with the node, never the version alone (a node deleted and made again by
    another session starts at version 0 again).
    """

    def __init__(
        self,
        service: CoordinationService[T],
        path: str,
        content: T,
        *,
        version: int,
        token: int,
        owner: str,
    ) -> None:
        self._service = service
        self.path = path
        self.content = content
        self.version = version
        self.fencing_token = token
        self.owner = owner
        self.lost: Future[None] = Future()
        self._listeners: list[Callable[[LockEvent], None]] = []
        self._mutex = threading.Lock()  # a check and a revalidation, one at a time
        self._suspended = False  # between SESSION_LOST and the revalidation
        self._revalidate = False  # the node went away while the session was unhealthy
        # the store's session losses when the node was made: a loss heard later
        # but counted before (a stale event) does not concern this node
        self._losses = service.store.session_losses

    @property
    def held(self) -> bool:
        """Neither lost nor suspended, and the store's session sure (its lease
        runs, no loss since the lock was made or revalidated): the holder may
        act on it (with its token). Read at the call: a process that was
        paused past its session timeout sees False at once."""
        store = self._service.store
        # a loss the store counted since the lock was made (or revalidated) ends
        # it at once, before the dispatcher tells the service
        return self.active and store.session_sure and self._losses >= store.session_losses

    @property
    def active(self) -> bool:
        """Neither lost nor suspended (the service's own view; ``held`` also asks
        the store's session lease)."""
        return not self.lost.done() and not self._suspended

    @property
    def suspended(self) -> bool:
        """True from the session's loss until the lock is revalidated (or lost):
        meanwhile another session may hold the lock, so ``held`` is False."""
        return self._suspended and not self.lost.done()

    def add_listener(self, listener: Callable[[LockEvent], None]) -> None:
        """Call ``listener(event)`` on each later :class:`LockEvent` of this lock.

        Listeners run on the store's dispatcher or the revalidation thread;
        what one raises is logged, not passed on.

        Raises:
            TypeError: if ``listener`` is not callable.
        """
        if not callable(listener):
            raise TypeError("a lock listener is a callable taking a LockEvent")
        self._listeners.append(listener)

    def _emit(self, event: LockEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("lock listener %r failed on %s", listener, event)

    def owns(self, node: GetResult | None) -> bool:
        """Whether ``node`` is this lock's node (same owner session and token)."""
        return (
            node is not None
            and node.stat.owner == self.owner
            and node.stat.token == self.fencing_token
        )

    def __enter__(self) -> ResourceLock[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        """Release the lock at the end of a ``with`` block (waits for the delete;
        a lock already lost is left alone)."""
        if not self.lost.done():
            self.release().result(timeout=self._service.store_timeout_s)

    def release(self) -> Future[None]:
        """Delete the lock node if it is still ours; completes ``lost``.

        The delete is conditional on the node's owner and token, checked
        atomically by the store: a holder that lost its node never deletes the
        node of the next holder.

        Returns:
            A future of ``None`` once the node is deleted, or found gone or
            another session's (nothing to release: not an error).

        Raises:
            StateClosedError: at the call or through the future, once the store
                is closed (``lost`` completes all the same).
            WriteFailedError, FencedError, PermissionDeniedError: through the
                future, as the store's write fails (a
                :class:`~pulsar_state.MetadataStore`: retries exhausted, fenced
                on every attempt, role refused).
        """

        def deleted(_: None) -> None:
            self._service._forget(self)

        def gone(exc: BaseException) -> None:
            self._service._forget(self)
            if not isinstance(exc, NotFoundError | BadVersionError):
                raise exc
            # the node is gone, or is another session's (not ours to delete)

        return futures.then(
            self._service.store.delete(
                self.path, expected_owner=self.owner, expected_token=self.fencing_token
            ),
            deleted,
            recover=gone,
        )
