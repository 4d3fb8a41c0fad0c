"""What every metadata store offers (PIP-45), and the parts they share.

Implementations: :class:`~pulsar_state.MetadataStore` (a Pulsar topic through
the state core) and :class:`~pulsar_state.MemoryMetadataStore` (one process,
the reference the conformance suite compares against). Every call returns a
:class:`concurrent.futures.Future`; listeners run on one dispatcher thread per
store, in log order, and never take it down.
"""

from __future__ import annotations

import logging
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future
from typing import Self

from pulsar_state.metadata_state import GetResult, Notification, Stat, validate_path

__all__ = ["BaseMetadataStore", "Listener"]

log = logging.getLogger(__name__)

Listener = Callable[[Notification], None]


class BaseMetadataStore(ABC):
    """The PIP-45 ``MetadataStore`` interface with futures."""

    def __init__(self, *, session_id: str) -> None:
        self.session_id = session_id
        self._listeners: list[Listener] = []
        self._listener_lock = threading.Lock()
        self._events: queue.SimpleQueue[Notification | None] = queue.SimpleQueue()
        self.listener_errors = 0
        self._dispatcher = threading.Thread(
            target=self._dispatch, name=f"pss-meta-{session_id[:8]}", daemon=True
        )
        self._dispatcher.start()

    # -- the interface ----------------------------------------------------------

    @abstractmethod
    def get(self, path: str) -> Future[GetResult | None]: ...

    @abstractmethod
    def get_children(self, path: str) -> Future[list[str]]: ...

    @abstractmethod
    def exists(self, path: str) -> Future[bool]: ...

    @abstractmethod
    def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
    ) -> Future[Stat]:
        """Create or replace ``path``. ``expected_version``: ``None`` any, ``-1``
        must not exist, ``n`` must be at version ``n`` (else ``BadVersionError``).
        ``ephemeral``: the node goes away with this store's session."""

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
        checked atomically with the delete (else ``BadVersionError``)."""

    @abstractmethod
    def fencing_token(self, path: str) -> int | None:
        """The token of the write that made ``path``'s current version (``Stat.token``):
        it grows with every write of any node (locks hand it out)."""

    @abstractmethod
    def close(self) -> None: ...

    # -- listeners --------------------------------------------------------------

    def register_listener(self, listener: Listener) -> None:
        """Call ``listener(notification)`` for every later change, in log order."""
        if not callable(listener):
            raise TypeError("a listener is a callable taking a Notification")
        with self._listener_lock:
            self._listeners.append(listener)

    def unregister_listener(self, listener: Listener) -> None:
        with self._listener_lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _notify(self, notes: list[Notification]) -> None:
        for note in notes:
            self._events.put(note)

    def _dispatch(self) -> None:
        while True:
            note = self._events.get()
            if note is None:
                return
            with self._listener_lock:
                listeners = list(self._listeners)
            for listener in listeners:
                try:
                    listener(note)
                except Exception:
                    self.listener_errors += 1
                    log.exception("metadata listener %r failed on %s", listener, note)

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
