"""MemoryMetadataStore: the in-process reference implementation of the interface.

Same tree (:class:`~pulsar_state.metadata.tree.MetadataTree`), same errors,
same notifications as the Pulsar-backed store, with nothing replicated: for
fast unit tests and as the model the conformance suite compares with. Several
"sessions" may share one tree (:meth:`MemoryMetadataStore.sibling`) to test
ephemeral nodes and locks between owners. Every write is encoded as for the
topic and refused as the state core refuses it (over ``max_ops_per_write`` or
``max_write_bytes`` of its ``StateConfig``), so a write too large for the
Pulsar store is too large here.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from concurrent.futures import Future
from typing import Any, TypeVar

from pulsar_state.config import StateConfig
from pulsar_state.core import futures
from pulsar_state.core.write.entry import encode_write
from pulsar_state.errors import StateClosedError, ValueTooLargeError
from pulsar_state.metadata.base import BaseMetadataStore
from pulsar_state.metadata.tree import (
    GetResult,
    MetaCodec,
    MetadataTree,
    MetaOp,
    SessionEvent,
    Stat,
    validate_path,
    validate_subtree,
)

__all__ = ["MemoryMetadataStore"]

T = TypeVar("T")

_CODEC = MetaCodec()


class _SharedTree:
    def __init__(self) -> None:
        self.tree = MetadataTree()
        self.lock = threading.RLock()
        self.stores: list[MemoryMetadataStore] = []
        self.seq = itertools.count(1)


class MemoryMetadataStore(BaseMetadataStore):
    """A metadata store in this process only."""

    def __init__(
        self,
        *,
        shared: Any = None,
        session_id: str | None = None,
        config: StateConfig | None = None,
    ) -> None:
        """``config``: the write limits (``max_ops_per_write``, ``max_write_bytes``)
        this store enforces, as a :class:`~pulsar_state.MetadataStore` with it would."""
        super().__init__(session_id=session_id or uuid.uuid4().hex)
        self._shared: _SharedTree = shared or _SharedTree()
        self.config = config or StateConfig()
        self._closed = False
        with self._shared.lock:
            self._shared.stores.append(self)

    def sibling(self, *, config: StateConfig | None = None) -> MemoryMetadataStore:
        """Another session on the same tree (another 'process'); ``config``: its
        write limits (default: this store's)."""
        return MemoryMetadataStore(shared=self._shared, config=config or self.config)

    def _run(self, fn: Any) -> Future[Any]:
        if self._closed:
            return futures.failed(StateClosedError("the metadata store is closed"))
        fut: Future[Any] = Future()

        def locked() -> Any:
            with self._shared.lock:
                return fn()

        futures.run_into(fut, locked)
        return fut

    def _apply(self, op: Any) -> None:
        notes = self._shared.tree.apply(op)
        for store in self._shared.stores:
            store._notify(notes)

    def _write(self, ops: list[MetaOp]) -> None:
        """Apply ``ops`` as one write, or refuse them all as the state core would."""
        encode_write(_CODEC, ops, self.config)
        for op in ops:
            self._apply(op)

    def get(self, path: str, latest: bool = False) -> Future[GetResult | None]:
        validate_path(path)  # one tree: always the latest
        return self._run(lambda: self._shared.tree.get(path))

    def get_children(self, path: str, latest: bool = False) -> Future[list[str]]:
        validate_path(path)
        return self._run(lambda: self._shared.tree.children(path))

    def exists(self, path: str, latest: bool = False) -> Future[bool]:
        validate_path(path)
        return self._run(lambda: path in self._shared.tree.nodes)

    def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Future[Stat]:
        if sequential:
            self._check_sequential(path, value, expected_version)
        else:
            self._check_put(path, value, expected_version)
        owner = self.session_id if ephemeral else None

        def run_sequential() -> Stat:
            self._check_session_for(ephemeral)  # under the tree's lock, as the expiry
            ops = self._shared.tree.plan_sequential(
                path,
                bytes(value),
                int(time.time() * 1000),
                owner=owner,
                token=next(self._shared.seq),
            )
            self._write(ops)
            node = ops[-1]
            assert node.record is not None
            return node.record.stat(node.path)

        if sequential:
            return self._run(run_sequential)

        def run() -> Stat:
            self._check_session_for(ephemeral)
            op = self._shared.tree.plan_put(
                path,
                bytes(value),
                expected_version,
                int(time.time() * 1000),
                owner=owner,
                token=next(self._shared.seq),
            )
            self._write([op])
            assert op.record is not None
            return op.record.stat(path)

        return self._run(run)

    def delete(
        self,
        path: str,
        expected_version: int | None = None,
        *,
        expected_owner: str | None = None,
        expected_token: int | None = None,
    ) -> Future[None]:
        validate_path(path)

        def run() -> None:  # planned and applied under the tree's lock: atomic
            op = self._shared.tree.plan_delete(
                path,
                expected_version,
                expected_owner=expected_owner,
                expected_token=expected_token,
            )
            self._write([op])

        return self._run(run)

    def delete_recursive(self, path: str) -> Future[list[str]]:
        validate_subtree(path)

        def run() -> list[str]:  # under the tree's lock: atomic
            ops = self._shared.tree.plan_delete_recursive(path)
            try:
                self._write(ops)
            except ValueTooLargeError as exc:
                self._explain_delete_recursive(path, len(ops), exc)
            return [op.path for op in ops]

        return self._run(run)

    def fencing_token(self, path: str) -> int | None:
        with self._shared.lock:
            record = self._shared.tree.nodes.get(path)
            return None if record is None else record.token

    def expire_session(self) -> None:
        """Lose this session, as a store cut off for longer than its timeout:
        ``SESSION_LOST`` first (this store's lock holders hear of it), then its
        ephemeral nodes are deleted, as other stores would; it makes no new ones
        (``SessionLostError``) until the session is back. The store stays
        usable; :meth:`reestablish_session` brings the session back."""
        self._session_event(SessionEvent.SESSION_LOST)
        self._drop_ephemeral()

    def reestablish_session(self) -> None:
        """The lost session is back (``SESSION_REESTABLISHED``): lock holders revalidate."""
        self._session_event(SessionEvent.SESSION_REESTABLISHED)

    def _drop_ephemeral(self) -> None:
        with self._shared.lock:  # atomic with a put's session check
            for path in self._shared.tree.ephemeral_of(self.session_id):
                self._apply(self._shared.tree.plan_delete(path, None))

    def close(self) -> None:
        if self._closed:
            return
        self._drop_ephemeral()
        self._closed = True
        with self._shared.lock:
            self._shared.stores.remove(self)
        self._stop_dispatcher()
