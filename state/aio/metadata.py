"""The asyncio surface of the metadata store and the coordination recipes.

The same core, awaited, as :mod:`pulsar_state.aio` (which exports these two
as well): each call starts the blocking surface's future and awaits it on the
running loop; the exceptions are the same classes.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

from pulsar_state.core.futures import wrap
from pulsar_state.metadata.base import BaseMetadataStore, Listener, SessionListener
from pulsar_state.metadata.tree import GetResult, Stat

__all__ = ["AsyncMetadataStore"]

T = TypeVar("T")


class AsyncMetadataStore:
    """``await``-able metadata store (any :class:`BaseMetadataStore`)."""

    def __init__(self, store: BaseMetadataStore) -> None:
        self.sync = store

    async def get(self, path: str, latest: bool = False) -> GetResult | None:
        """The node at ``path`` (:meth:`BaseMetadataStore.get`, awaited).

        Returns:
            The :class:`GetResult`, or ``None`` if there is no node.

        Raises:
            TypeError, ValueError: for a path that is not a valid metadata path.
            StateClosedError, OperationTimeoutError, ForkedProcessError: as
                :meth:`BaseMetadataStore.get` and its future fail, raised by the await.
        """
        return await wrap(self.sync.get(path, latest))

    async def get_children(self, path: str, latest: bool = False) -> list[str]:
        """The names of ``path``'s children (:meth:`BaseMetadataStore.get_children`, awaited).

        Returns:
            The child names (sorted; empty for none).

        Raises:
            TypeError, ValueError: for a path that is not a valid metadata path.
            StateClosedError, OperationTimeoutError, ForkedProcessError: as
                :meth:`BaseMetadataStore.get_children` and its future fail, raised by the await.
        """
        return await wrap(self.sync.get_children(path, latest))

    async def exists(self, path: str) -> bool:
        """Whether a node is at ``path`` (:meth:`BaseMetadataStore.exists`, awaited).

        Returns:
            ``True`` if the node exists.

        Raises:
            TypeError, ValueError: for a path that is not a valid metadata path.
            StateClosedError, OperationTimeoutError, ForkedProcessError: as
                :meth:`BaseMetadataStore.exists` and its future fail, raised by the await.
        """
        return await wrap(self.sync.exists(path))

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        """Create or replace ``path`` (:meth:`BaseMetadataStore.put`, awaited).

        Returns:
            The node's new :class:`Stat`.

        Raises:
            TypeError, ValueError: for a bad path, prefix, value or
                ``expected_version``.
            BadVersionError: when the node's version is not ``expected_version``.
            SessionLostError: for an ephemeral put while the session is lost.
            StateClosedError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, ForkedProcessError: as
                :meth:`BaseMetadataStore.put` and its future fail, raised by the await.
        """
        return await wrap(
            self.sync.put(path, value, expected_version, ephemeral=ephemeral, sequential=sequential)
        )

    async def delete_recursive(self, path: str) -> list[str]:
        """Delete ``path`` and below (:meth:`BaseMetadataStore.delete_recursive`, awaited).

        Returns:
            The deleted paths, deepest first.

        Raises:
            TypeError, ValueError: for ``/`` or a path that is not a valid metadata path.
            TooManyOpsError, ValueTooLargeError: for a subtree one write cannot
                delete (nothing is deleted), as
                :meth:`BaseMetadataStore.delete_recursive`.
            StateClosedError, WriteFailedError, FencedError,
                PermissionDeniedError, ForkedProcessError: as
                :meth:`BaseMetadataStore.delete_recursive` and its future fail, raised by the await.
        """
        return await wrap(self.sync.delete_recursive(path))

    async def delete(
        self,
        path: str,
        expected_version: int | None = None,
        *,
        expected_owner: str | None = None,
        expected_token: int | None = None,
    ) -> None:
        """Delete ``path`` (:meth:`BaseMetadataStore.delete`, awaited).

        Raises:
            TypeError, ValueError: for a path that is not a valid metadata path.
            NotFoundError: when there is no node at ``path``.
            BadVersionError: when the node's version, owner or token is not the
                expected one.
            StateClosedError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, ForkedProcessError: as
                :meth:`BaseMetadataStore.delete` and its future fail, raised by the await.
        """
        await wrap(
            self.sync.delete(
                path,
                expected_version,
                expected_owner=expected_owner,
                expected_token=expected_token,
            )
        )

    def fencing_token(self, path: str) -> int | None:
        """Local, no I/O: the same as the sync store's."""
        return self.sync.fencing_token(path)

    def register_listener(self, listener: Listener, prefix: str | None = None) -> None:
        """Listeners run on the store's dispatcher thread; use ``loop.call_soon_threadsafe``."""
        self.sync.register_listener(listener, prefix)

    def unregister_listener(self, listener: Listener) -> None:
        """Remove every registration of ``listener`` (whatever its prefix)."""
        self.sync.unregister_listener(listener)

    def register_session_listener(self, listener: SessionListener) -> None:
        """Run on the store's dispatcher thread, as :meth:`register_listener`."""
        self.sync.register_session_listener(listener)

    def unregister_session_listener(self, listener: SessionListener) -> None:
        """Remove every registration of the session ``listener``."""
        self.sync.unregister_session_listener(listener)

    async def close(self) -> None:
        """Close the store (:meth:`BaseMetadataStore.close`) in a worker thread.

        Raises:
            ForkedProcessError: in a process forked after a
                :class:`~pulsar_state.MetadataStore` was made.
        """
        await asyncio.to_thread(self.sync.close)
