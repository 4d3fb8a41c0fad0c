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
    """A held lock. ``lost`` completes when the lock is lost, never on its release.

    ``lost`` stands for PIP-45's lock-expired future (Pulsar's Java lock also
    completes that one on release; this one does not): it completes once the lock is
    taken, its node deleted by anyone but this lock's :meth:`release` (an
    operator, the expiry of its session, the store's close), or not re-creatable
    after a session loss; and when :meth:`release` finds the node already gone or
    another's (the loss was not heard of yet). A release that deletes the lock's
    own node leaves ``lost`` pending for good: ``released`` tells that end.

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
        # a check, a revalidation and a release, one at a time (re-entrant: a
        # listener called under it may release the lock)
        self._mutex = threading.RLock()
        self._suspended = False  # between SESSION_LOST and the revalidation
        self._released = False  # release() was called: given up, never a loss
        self._releasing: Future[None] | None = None  # the last release's delete
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
        """Neither lost, released nor suspended (the service's own view; ``held``
        also asks the store's session lease)."""
        return not self.lost.done() and not self._released and not self._suspended

    @property
    def released(self) -> bool:
        """True once :meth:`release` was called: the holder gave the lock up
        (``held`` is False from the call on; ``lost`` completes only if the
        release found the lock lost already)."""
        return self._released

    @property
    def suspended(self) -> bool:
        """True from the session's loss until the lock is revalidated (or lost,
        or released): meanwhile another session may hold the lock, so ``held``
        is False."""
        return self._suspended and not self.lost.done() and not self._released

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
        a lock already lost or released is left alone)."""
        if not self.lost.done() and not self._released:
            self.release().result(timeout=self._service.store_timeout_s)

    def release(self) -> Future[None]:
        """Give the lock up: delete its node if it is still this lock's.

        From the call on the lock is ``released`` and no longer ``held``. The
        delete is conditional on the node's owner and token, checked atomically
        by the store: a holder that lost its node never deletes the node of
        the next holder. It waits for a check or a revalidation of this lock
        in progress (which may re-create the node with a new token), so it
        deletes the node as it is after them. ``lost`` does not complete,
        unless the node was already gone or another's: the lock had been lost
        (``LockEvent.LOST``). Calling it again returns the same future, unless
        that one failed (then the delete is tried again).

        Returns:
            A future of ``None`` once the node is deleted, or found gone or
            another session's (nothing to release: not an error).

        Raises:
            StateClosedError: at the call or through the future, once the
                store is closed (its close ended the lock: ``lost`` completes
                when the service hears of it, unless the lock was released
                first).
            WriteFailedError, FencedError, PermissionDeniedError: through the
                future, as the store's write fails (a
                :class:`~pulsar_state.MetadataStore`: retries exhausted, fenced
                on every attempt, role refused).
        """
        with self._mutex:
            releasing = self._releasing
            if releasing is not None and not (
                releasing.done() and releasing.exception() is not None
            ):
                return releasing  # in flight, or done: once is enough
            self._released = True
            self._service._forget(self)  # its node's changes concern no one now
            deleting = self._service.store.delete(
                self.path, expected_owner=self.owner, expected_token=self.fencing_token
            )
            self._releasing = futures.then(deleting, lambda _: None, recover=self._found_gone)
            return self._releasing

    def _found_gone(self, exc: BaseException) -> None:
        """A release's delete failed: the node was gone or another's (the lock
        had been lost: not an error), or the delete itself failed (raised)."""
        if not isinstance(exc, NotFoundError | BadVersionError):
            raise exc
        self._service._lose(self)
