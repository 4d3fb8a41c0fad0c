"""What every metadata store offers (PIP-45), and the parts they share.

Implementations: :class:`~pulsar_state.MetadataStore` (a Pulsar topic through
the state core) and :class:`~pulsar_state.MemoryMetadataStore` (one process,
the reference the conformance suite compares against). Every call returns a
:class:`concurrent.futures.Future`; listeners run on one dispatcher thread per
store, in log order, and never take it down. A listener may watch one path
prefix only (that path and everything below it). Session listeners hear of
the store's own session (:class:`~pulsar_state.metadata.tree.SessionEvent`)
on the same thread, in order with the notifications.
"""

from __future__ import annotations

import logging
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, NoReturn, Self

from pulsar_state.core.log.format import MESSAGE_OVERHEAD_BYTES
from pulsar_state.errors import SessionLostError, TooManyOpsError, ValueTooLargeError
from pulsar_state.metadata.tree import (
    GetResult,
    Notification,
    SessionEvent,
    Stat,
    validate_path,
    validate_sequential_prefix,
)

__all__ = ["BaseMetadataStore", "Listener", "SessionListener"]

log = logging.getLogger(__name__)

Listener = Callable[[Notification], None]
SessionListener = Callable[[SessionEvent], None]


def _under(path: str, prefix: str | None) -> bool:
    """Whether ``path`` is ``prefix`` or below it (whole segments: ``/a`` is not under ``/ab``)."""
    return prefix is None or prefix in ("/", path) or path.startswith(prefix + "/")


class BaseMetadataStore(ABC):
    """The PIP-45 ``MetadataStore`` interface with futures."""

    def __init__(self, *, session_id: str) -> None:
        self.session_id = session_id
        self._listeners: list[tuple[Listener, str | None]] = []
        self._session_listeners: list[SessionListener] = []
        self._listener_lock = threading.Lock()
        self._events: queue.SimpleQueue[Notification | SessionEvent | None] = queue.SimpleQueue()
        self.listener_errors = 0
        # the last session event; None: connected since the start
        self.session_state: SessionEvent | None = None
        self.session_losses = 0  # SESSION_LOST events so far (listeners hear them later)
        self._dispatcher = threading.Thread(
            target=self._dispatch, name=f"pss-meta-{session_id[:8]}", daemon=True
        )
        self._dispatcher.start()

    # -- the interface ----------------------------------------------------------

    @abstractmethod
    def get(self, path: str, latest: bool = False) -> Future[GetResult | None]:
        """The node at ``path`` or ``None``. ``latest``: first catch up with
        every write made so far (by any store), not only what this one has seen.

        Returns:
            A future of the :class:`~pulsar_state.GetResult` (value and
            :class:`~pulsar_state.Stat`), or ``None`` if there is no node.

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path (InvalidPathError is a ValueError).
            ForkedProcessError: at the call, in a process forked after a
                :class:`~pulsar_state.MetadataStore` was made.
            StateClosedError: through the future, once the store is closed.
            OperationTimeoutError: through the future of a
                :class:`~pulsar_state.MetadataStore`, with ``latest=True``, when
                it does not catch up within the operation timeout.
        """

    @abstractmethod
    def get_children(self, path: str, latest: bool = False) -> Future[list[str]]:
        """The names of ``path``'s children (``latest`` as for :meth:`get`).

        Returns:
            A future of the child names (last segments, sorted); empty for a
            path with no children or no node.

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path (InvalidPathError is a ValueError).
            ForkedProcessError: at the call, in a process forked after a
                :class:`~pulsar_state.MetadataStore` was made.
            StateClosedError: through the future, once the store is closed.
            OperationTimeoutError: through the future of a
                :class:`~pulsar_state.MetadataStore`, with ``latest=True``, when
                it does not catch up within the operation timeout.
        """

    @abstractmethod
    def exists(self, path: str) -> Future[bool]:
        """Whether a node is at ``path`` (implementations take ``latest`` as :meth:`get`).

        Returns:
            A future of ``True`` if the node exists.

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path (InvalidPathError is a ValueError).
            ForkedProcessError: at the call, in a process forked after a
                :class:`~pulsar_state.MetadataStore` was made.
            StateClosedError: through the future, once the store is closed.
            OperationTimeoutError: through the future of a
                :class:`~pulsar_state.MetadataStore`, with ``latest=True``, when
                it does not catch up within the operation timeout.
        """

    @abstractmethod
    def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Future[Stat]:
        """Create or replace ``path``. ``expected_version``: ``None`` any, ``-1``
        must not exist, ``n`` must be at version ``n`` (else ``BadVersionError``).
        ``ephemeral``: the node goes away with this store's session.

        ``sequential``: ``path`` is a name prefix (``/queue/item-``); a new node
        is created at the prefix plus the next number of its parent's counter,
        ten digits zero-padded (``/queue/item-0000000001``), which grows by one
        per sequential put under that parent and never goes back, even when
        the nodes or the parent are deleted. ``Stat.path`` is the created path.
        ``expected_version`` must be ``None`` or ``-1`` then.

        Returns:
            A future of the node's new :class:`~pulsar_state.Stat` (version,
            times, owner, fencing token, path).

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path (InvalidPathError is a ValueError).
            ForkedProcessError: at the call, in a process forked after a
                :class:`~pulsar_state.MetadataStore` was made.
            TypeError, ValueError: at the call, for a value that is not bytes,
                a put at ``/``, an ``expected_version`` below ``-1`` (or other
                than ``None``/``-1`` with ``sequential``), a bad prefix.
            BadVersionError: through the future, when the node's version is
                not ``expected_version`` (``-1``: the node exists).
            SessionLostError: through the future, for an ephemeral put while
                this store's session is lost.
            StateClosedError: at the call or through the future, once the
                store is closed.
            ValueTooLargeError: through the future, for a write larger than
                one Pulsar entry (``max_write_bytes``; the memory store
                refuses what the Pulsar store would).
            WriteFailedError, FencedError, PermissionDeniedError: through the
                future of a :class:`~pulsar_state.MetadataStore`, as for any
                write of the state core (retries exhausted, fenced on every
                attempt, role refused).
        """

    @abstractmethod
    def delete_recursive(self, path: str) -> Future[list[str]]:
        """Delete ``path`` and every node below it in one atomic write (deepest
        first, each with its notifications); the deleted paths (none: nothing
        there, not an error). ``path`` must not be ``/``.

        One write holds at most ``max_ops_per_write`` deletes and
        ``max_write_bytes`` bytes, a delete costing its path's length plus the
        message overhead (96 bytes): with the defaults, about 35,800 nodes of
        21-character paths. A larger subtree is refused before anything is
        written (never split: readers would see it half deleted); delete it in
        parts, its children one by one.

        Returns:
            A future of the deleted paths, deepest first.

        Raises:
            TypeError, ValueError: at the call, for ``/`` or a path that is not a valid
                metadata path (InvalidPathError is a ValueError).
            ForkedProcessError: at the call, in a process forked after a
                :class:`~pulsar_state.MetadataStore` was made.
            StateClosedError: at the call or through the future, once the
                store is closed.
            TooManyOpsError, ValueTooLargeError: through the future, for a
                subtree one write cannot delete, on every store (nothing is
                deleted; the message says how many nodes and bytes, and what
                to do).
            WriteFailedError, FencedError, PermissionDeniedError: through the
                future of a :class:`~pulsar_state.MetadataStore`, as for any
                write of the state core (retries exhausted, fenced on every
                attempt, role refused).
        """

    @abstractmethod
    def delete(
        self,
        path: str,
        expected_version: int | None = None,
        *,
        expected_owner: str | None = None,
        expected_token: int | None = None,
    ) -> Future[None]:
        """Delete ``path`` (``NotFoundError`` if absent, ``BadVersionError``).

        ``expected_owner`` / ``expected_token``: delete only if the node's owner
        session and fencing token (``Stat.owner``, ``Stat.token``) are these,
        checked atomically with the delete (else ``BadVersionError``).

        Returns:
            A future of ``None`` once the node is deleted.

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path (InvalidPathError is a ValueError).
            ForkedProcessError: at the call, in a process forked after a
                :class:`~pulsar_state.MetadataStore` was made.
            NotFoundError: through the future, when there is no node at ``path``.
            BadVersionError: through the future, when the node's version,
                owner or token is not the expected one.
            StateClosedError: at the call or through the future, once the
                store is closed.
            ValueTooLargeError: through the future, for a write larger than
                one Pulsar entry (``max_write_bytes``; the memory store
                refuses what the Pulsar store would).
            WriteFailedError, FencedError, PermissionDeniedError: through the
                future of a :class:`~pulsar_state.MetadataStore`, as for any
                write of the state core (retries exhausted, fenced on every
                attempt, role refused).
        """

    @abstractmethod
    def fencing_token(self, path: str) -> int | None:
        """The token of the write that made ``path``'s current version (``Stat.token``):
        it grows with every write of any node (locks hand it out)."""

    @abstractmethod
    def close(self) -> None:
        """Close the store (idempotent): this session's ephemeral nodes go away
        (a :class:`~pulsar_state.MemoryMetadataStore` deletes them at once;
        others see a :class:`~pulsar_state.MetadataStore`'s go within its
        session timeout), listeners hear no more, and later calls fail with
        StateClosedError.

        Raises:
            ForkedProcessError: in a process forked after a
                :class:`~pulsar_state.MetadataStore` was made.
        """

    # -- listeners --------------------------------------------------------------

    def register_listener(self, listener: Listener, prefix: str | None = None) -> None:
        """Call ``listener(notification)`` for every later change, in log order;
        with ``prefix``, only for changes of that path or a path below it.

        Raises:
            TypeError: if ``listener`` is not callable or ``prefix`` is no str.
            ValueError: for a ``prefix`` that is not a valid metadata path.
        """
        if not callable(listener):
            raise TypeError("a listener is a callable taking a Notification")
        if prefix is not None:
            validate_path(prefix)
        with self._listener_lock:
            self._listeners.append((listener, prefix))

    def unregister_listener(self, listener: Listener) -> None:
        """Remove every registration of ``listener`` (whatever its prefix)."""
        with self._listener_lock:
            self._listeners = [(f, p) for f, p in self._listeners if f != listener]

    def register_session_listener(self, listener: SessionListener) -> None:
        """Call ``listener(event)`` for each later event of this store's session.

        Raises:
            TypeError: if ``listener`` is not callable.
        """
        if not callable(listener):
            raise TypeError("a session listener is a callable taking a SessionEvent")
        with self._listener_lock:
            self._session_listeners.append(listener)

    def unregister_session_listener(self, listener: SessionListener) -> None:
        """Remove every registration of ``listener`` (nothing if it has none)."""
        with self._listener_lock:
            self._session_listeners = [f for f in self._session_listeners if f != listener]

    @property
    def session_sure(self) -> bool:
        """Whether this store can be sure its session is alive right now (a
        holder acts on its locks only then). Always, for a store without a
        network; the Pulsar store keeps a lease."""
        return self.session_state is not SessionEvent.SESSION_LOST

    @property
    def session_healthy(self) -> bool:
        """False between a lost connection (or session) and its return."""
        state = self.session_state
        return state is None or state.healthy

    def _check_session_for(self, ephemeral: bool) -> None:
        """An ephemeral node cannot be made while the session is lost."""
        if ephemeral and self.session_state is SessionEvent.SESSION_LOST:
            raise SessionLostError(
                f"session {self.session_id} is lost: no ephemeral node until it is back"
            )

    def _notify(self, notes: list[Notification]) -> None:
        for note in notes:
            self._events.put(note)

    def _session_event(self, event: SessionEvent) -> None:
        """Record ``event`` now (``session_healthy`` changes at once) and tell
        the session listeners, after the notifications queued before it."""
        self.session_state = event
        if event is SessionEvent.SESSION_LOST:
            self.session_losses += 1
        log.info("metadata session %s: %s", self.session_id, event.value)
        self._events.put(event)

    def _dispatch(self) -> None:
        while True:
            event = self._events.get()
            if event is None:
                return
            with self._listener_lock:
                if isinstance(event, SessionEvent):
                    targets: list[Callable[[Any], None]] = list(self._session_listeners)
                else:
                    targets = [f for f, p in self._listeners if _under(event.path, p)]
            for listener in targets:
                try:
                    listener(event)
                except Exception:
                    self.listener_errors += 1
                    log.exception("metadata listener %r failed on %s", listener, event)

    def _stop_dispatcher(self) -> None:
        self._events.put(None)
        self._dispatcher.join(timeout=5)

    # -- helpers ----------------------------------------------------------------

    @staticmethod
    def _check_put(path: str, value: bytes, expected_version: int | None) -> None:
        validate_path(path)
        if path == "/":
            raise ValueError("the root has no value")
        if not isinstance(value, bytes | bytearray):
            raise TypeError(f"a value is bytes, got {type(value).__name__}")
        if expected_version is not None and (
            not isinstance(expected_version, int) or expected_version < -1
        ):
            raise ValueError(f"expected_version is None, -1 or >= 0, got {expected_version!r}")

    @staticmethod
    def _explain_delete_recursive(path: str, count: int, exc: BaseException) -> NoReturn:
        """A recursive delete of ``count`` nodes refused as larger than one
        write (before anything was written: the state core checks a write's
        ops and bytes first): the same error, saying so and what to do."""
        if isinstance(exc, TooManyOpsError):
            over = f"{count} deletes, over max_ops_per_write={exc.limit}"
        elif isinstance(exc, ValueTooLargeError):
            over = (
                f"{exc.size} bytes (each delete costs its path's length + "
                f"{MESSAGE_OVERHEAD_BYTES}), over max_write_bytes={exc.limit}"
            )
        else:
            raise exc
        exc.args = (
            f"delete_recursive({path!r}) of {count} nodes is one atomic write of {over}: "
            "nothing was deleted. Delete the subtree in parts (delete_recursive of "
            "its children one by one: not atomic as a whole), or raise that limit "
            "(StateConfig; max_write_bytes up to the broker's maxMessageSize)",
        )
        raise exc

    @classmethod
    def _check_sequential(cls, prefix: str, value: bytes, expected_version: int | None) -> None:
        validate_sequential_prefix(prefix)
        cls._check_put(prefix, value, expected_version)
        if expected_version not in (None, -1):
            raise ValueError(
                f"a sequential put always creates: expected_version is None or -1, "
                f"got {expected_version!r}"
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
