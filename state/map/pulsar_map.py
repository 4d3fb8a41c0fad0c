"""PulsarMap: a replicated key-value map on one Pulsar topic (PIP-137's recipe).

The topic is a plain keyed, compactable topic: the message key is the map key,
the payload the serialized value, an empty payload deletes. Pulsar's own
``TableView``, compaction and the Spark source read it as such (keys under
``__pss__/`` are the state core's markers; skip them).

Every call returns a :class:`concurrent.futures.Future`. Reads are local unless
``latest=True``. ``put`` is a blind write (group commit with other puts);
everything that looks at the current value (``update``, ``replace``,
``put_if_absent``, ``delete``) runs against the latest state and is re-run if
the writer is fenced meanwhile, so concurrent read-modify-writes lose nothing.
:meth:`PulsarMap.transact` is the general form: any number of puts and
deletes, computed from the latest state, written as one atomic write.

Errors (each method's ``Raises:`` names the ones it can meet). At the call:
``ForkedProcessError`` in a process forked after the map was made;
``StateClosedError`` for a write once the map is closed; ``TypeError`` or
``ValueError`` for a key or value the map refuses (a key that is not a
``str`` or is reserved, an empty key for a value (Pulsar's compaction drops
messages without a key), a value the serde cannot serialize or that
serializes to empty bytes). Through the future of a read:
``StateClosedError`` once the map is closed (after its reader failed, the
error that stopped it: ``InvalidMessageError`` with
``on_invalid_message="fail"``, ``PermissionDeniedError``), and with
``latest=True`` ``OperationTimeoutError`` when local state does not catch up
within the operation timeout. Through the future of a write:
``TooManyOpsError`` / ``ValueTooLargeError`` over ``max_ops_per_write`` /
``max_write_bytes`` (nothing is written), ``WriteFailedError`` when it could
not be published within its retry budget (``StateConfig.retry``),
``FencedError`` when another writer took the topic over on every attempt,
``PermissionDeniedError`` when the broker refuses this client's role,
``StateClosedError`` when the map closes before the write lands; and
whatever a user function (``fn``, ``filter``, ``reader``) raises, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from types import MappingProxyType
from typing import Any, NoReturn, Self, TypeVar, cast, overload

import pulsar

from pulsar_state.cluster.endpoint import AdminEndpoint, resolve_admin
from pulsar_state.config import DEFAULT_COMPACTION_THRESHOLD_BYTES, StateConfig
from pulsar_state.core import futures
from pulsar_state.core.log.format import MESSAGE_OVERHEAD_BYTES
from pulsar_state.core.manager import SharedStateManager
from pulsar_state.errors import TooManyOpsError, ValueTooLargeError
from pulsar_state.map.checkpoint.format import Manifest
from pulsar_state.map.checkpoint.policy import CheckpointPolicy, resolve_policy
from pulsar_state.map.checkpoint.writer import checkpointer_factory
from pulsar_state.map.op import MapCodec, MapOp, apply_map_op, copy_value
from pulsar_state.map.reads import MapReads
from pulsar_state.map.watch import (
    DEFAULT_MAX_PENDING,
    MapChange,
    MapWatch,
    MapWatches,
)
from pulsar_state.position import Position
from pulsar_state.serde import JsonSerde, KeySerde, Serde, StrKeySerde

__all__ = ["MapChange", "MapOp", "MapWatch", "PulsarMap"]

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")


class PulsarMap(MapReads[K, V]):
    """A key-value map replicated through a Pulsar topic. See the module docstring."""

    def __init__(
        self,
        client: pulsar.Client,
        topic: str,
        *,
        admin_url: str | None = None,
        admin: AdminEndpoint | None = None,
        admin_headers: dict[str, str] | None = None,
        admin_tls_trust_cert_path: str | None = None,
        admin_tls_allow_insecure: bool = False,
        key_serde: KeySerde[K] | None = None,
        value_serde: Serde[V] | None = None,
        config: StateConfig | None = None,
        checkpoints: CheckpointPolicy | bool | None = None,
    ) -> None:
        """``admin_url`` (a URL) or ``admin`` (an
        :class:`~pulsar_state.cluster.endpoint.AdminEndpoint`: the URL with its
        credentials, TLS client certificate and trust): the admin API that protects
        the topic. ``admin_headers``, ``admin_tls_trust_cert_path`` and
        ``admin_tls_allow_insecure`` are deprecated: set them on the endpoint."""
        endpoint = resolve_admin(
            admin_url,
            admin,
            legacy={
                "admin_headers": admin_headers,
                "admin_tls_trust_cert_path": admin_tls_trust_cert_path,
                "admin_tls_allow_insecure": admin_tls_allow_insecure,
            },
        )
        self._client = client
        self._codec: MapCodec[K, V] = MapCodec(
            key_serde or StrKeySerde(),  # type: ignore[arg-type]
            value_serde or JsonSerde(),
        )
        config = (config or StateConfig()).with_default_compaction(
            DEFAULT_COMPACTION_THRESHOLD_BYTES
        )
        policy = resolve_policy(
            checkpoints,
            config.max_write_bytes,
            # only then can the checkpoint topic get zero retention (old ones trimmed)
            protected=endpoint is not None and config.ensure_retention,
        )
        self.manager: SharedStateManager[dict[K, V], MapOp[K, V]] = SharedStateManager(
            client=client,
            topic=topic,
            codec=self._codec,
            initializer=dict,
            applier=apply_map_op,
            config=config,
            admin=endpoint,
            compactable=True,
            checkpointer=(
                None
                if policy is None
                else checkpointer_factory(client, config, self._codec, policy)
            ),
        )
        self._watches = MapWatches(client, self.manager, self._codec)

    @property
    def topic(self) -> str:
        """The state topic's full name (``persistent://tenant/namespace/name``)."""
        return self.manager.topic

    # -- writes ---------------------------------------------------------------

    def put(self, key: K, value: V) -> Future[Position]:
        """Set ``key``: a blind write (it may share one entry with other puts).

        Returns:
            A future of the write's :class:`Position` (a token for
            ``read(at_least=...)`` and ``watch(from_position=...)``).

        Raises:
            TypeError, ValueError: at the call, for a key or value the map
                refuses (not a str key, a reserved or empty key, a value the
                serde cannot serialize or one serializing to empty bytes).
            StateClosedError, ForkedProcessError: at the call (module docstring: *Errors*).
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError: through the future.
        """
        return self.manager.write_ops((self._codec.put_op(key, value),))

    def put_all(self, entries: dict[K, V]) -> Future[Position]:
        """Set many keys in one atomic write.

        Returns:
            A future of the write's :class:`Position`.

        Raises:
            TypeError, ValueError: at the call, for a key or value the map
                refuses (as for :meth:`put`).
            StateClosedError, ForkedProcessError: at the call (module docstring: *Errors*).
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError: through the future.
        """
        return self.manager.write_ops([self._codec.put_op(k, v) for k, v in entries.items()])

    def delete(self, key: K) -> Future[V | None]:
        """Remove ``key``; the future gives the value it had (``None``: absent).

        Returns:
            A future of the value ``key`` had, or ``None`` (nothing written).

        Raises:
            TypeError, ValueError: at the call, for a key the map refuses.
            StateClosedError, ForkedProcessError: at the call (module docstring: *Errors*).
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError: through the future.
        """
        op = self._codec.delete_op(key)
        previous: dict[str, Any] = {}

        def gen(state: dict[K, V]) -> list[MapOp[K, V]]:
            previous["v"] = copy_value(state.get(key))
            return [op] if key in state else []

        return futures.then(self.manager.write(gen), lambda _position: previous.get("v"))

    def put_if_absent(self, key: K, value: V) -> Future[V | None]:
        """Set ``key`` unless present; the future gives the existing value or ``None``.

        As PIP-137 defines it, ``replace(key, None, value)``: a key holding
        ``None`` (a JSON null ``put`` stored, which :meth:`get` cannot tell
        from no key) counts as absent, so ``None`` always means this call set it.

        Returns:
            A future of the value already there (nothing written), or ``None``
            when this call set it.

        Raises:
            TypeError, ValueError: at the call, for a key or value the map
                refuses.
            StateClosedError, ForkedProcessError: at the call (module docstring: *Errors*).
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError: through the future.
        """
        op = self._codec.put_op(key, value)
        existing: dict[str, Any] = {}

        def gen(state: dict[K, V]) -> list[MapOp[K, V]]:
            current = state.get(key)
            if current is not None:
                existing["v"] = copy_value(current)
                return []
            existing.pop("v", None)
            return [op]

        return futures.then(self.manager.write(gen), lambda _position: existing.get("v"))

    def replace(self, key: K, expected: V | None, value: V) -> Future[bool]:
        """Set ``key`` to ``value`` only if its value is ``expected`` now.

        The current value is what :meth:`get` gives: ``None`` for an absent key
        (or one holding ``None``). So ``expected=None`` means "only if absent",
        PIP-137's put-if-absent (:meth:`put_if_absent`), and
        ``replace(key, get(key), value)`` succeeds unless the key changed.

        Returns:
            A future of ``True`` if it was set, ``False`` if the current value
            differed (nothing written).

        Raises:
            TypeError, ValueError: at the call, for a key or value the map
                refuses.
            StateClosedError, ForkedProcessError: at the call (module docstring: *Errors*).
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError: through the future.
        """
        op = self._codec.put_op(key, value)
        outcome: dict[str, bool] = {}

        def gen(state: dict[K, V]) -> list[MapOp[K, V]]:
            outcome["ok"] = state.get(key) == expected
            return [op] if outcome["ok"] else []

        return futures.then(self.manager.write(gen), lambda _position: outcome["ok"])

    def update(self, key: K, fn: Callable[[V | None], V | None]) -> Future[V | None]:
        """Set ``key`` to ``fn(current)`` atomically (``None`` result: delete).

        ``fn`` may run several times (after fencing); it must be side-effect free.

        Returns:
            A future of the new value (a copy), or ``None`` if ``fn`` deleted
            the key.

        Raises:
            Exception: through the future, whatever ``fn`` raises, unchanged
                (nothing is written).
            TypeError, ValueError: through the future, for a key or a new value
                the map refuses.
            StateClosedError, ForkedProcessError: at the call (module docstring: *Errors*).
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError: through the future.
        """
        result: dict[str, Any] = {}

        def gen(state: dict[K, V]) -> list[MapOp[K, V]]:
            new = fn(copy_value(state.get(key)))
            result["v"] = new
            if new is None:
                return [self._codec.delete_op(key)] if key in state else []
            return [self._codec.put_op(key, new)]

        return futures.then(self.manager.write(gen), lambda _position: copy_value(result.get("v")))

    def update_multiple(
        self, filter: Callable[[K, V], bool], fn: Callable[[K, V], V | None]
    ) -> Future[int]:
        """Replace every accepted entry with ``fn(k, v)`` in one atomic write.

        ``fn`` returning ``None`` deletes the entry. Both functions may run
        several times (after fencing); they must be side-effect free.

        Returns:
            A future of how many entries were changed or deleted.

        Raises:
            Exception: through the future, whatever ``filter`` or ``fn``
                raises, unchanged (nothing is written).
            TypeError, ValueError: through the future, for a new value the map
                refuses.
            StateClosedError, ForkedProcessError: at the call (module docstring: *Errors*).
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError: through the future.
        """
        count: dict[str, int] = {}

        def gen(state: dict[K, V]) -> list[MapOp[K, V]]:
            ops = []
            for k, v in state.items():
                if filter(k, v):
                    new = fn(k, copy_value(v))
                    ops.append(
                        self._codec.delete_op(k) if new is None else self._codec.put_op(k, new)
                    )
            count["n"] = len(ops)
            return ops

        return futures.then(self.manager.write(gen), lambda _position: count["n"])

    def clear(self) -> Future[int]:
        """Delete every key in one atomic write; the future gives how many.

        One write holds at most ``max_ops_per_write`` deletes and
        ``max_write_bytes`` bytes, a delete costing its key's length plus
        the message overhead (96 bytes): with the defaults, about 39,000 keys
        of 10 characters. A larger map is refused before anything is written
        (every reader, compaction included, would otherwise see some keys
        gone and others not): delete it in parts, e.g. ``transact`` with a
        share of the keys per write.

        Returns:
            A future of how many keys were deleted.

        Raises:
            StateClosedError, ForkedProcessError: at the call (module docstring: *Errors*).
            TooManyOpsError, ValueTooLargeError: through the future, for a map
                one write cannot clear (nothing is deleted; the message says
                how many keys and bytes, and what to do).
            WriteFailedError, FencedError, PermissionDeniedError,
                StateClosedError: through the future.
        """
        count: dict[str, int] = {}

        def gen(state: dict[K, V]) -> list[MapOp[K, V]]:
            count["n"] = len(state)
            return [self._codec.delete_op(k) for k in state]

        return futures.then(
            self.manager.write(gen),
            lambda _position: count["n"],
            recover=lambda exc: _explain_clear(count.get("n", 0), exc),
        )

    @overload
    def transact(
        self,
        fn: Callable[[Mapping[K, V]], Iterable[MapOp[K, V]] | None],
        *,
        reader: None = None,
    ) -> Future[Position]: ...

    @overload
    def transact(
        self,
        fn: Callable[[Mapping[K, V]], Iterable[MapOp[K, V]] | None],
        *,
        reader: Callable[[Mapping[K, V]], R],
    ) -> Future[R]: ...

    def transact(
        self,
        fn: Callable[[Mapping[K, V]], Iterable[MapOp[K, V]] | None],
        *,
        reader: Callable[[Mapping[K, V]], R] | None = None,
    ) -> Future[Position] | Future[R]:
        """Write the ops ``fn(latest)`` returns as one atomic write.

        ``fn`` gets a read-only view of the latest state and returns the map's
        ops (:meth:`MapOp.put`, :meth:`MapOp.delete`), or nothing to write
        nothing. Every reader sees all of them or none. ``fn`` may run more
        than once (after fencing, on the newer state): it must have no side
        effects and must not keep or change the view or its values. Keys and
        values are validated and serialized as for :meth:`put`; one bad op
        fails the whole write. ``reader`` (optional) runs on the state right
        after the write, under the same lock, to return a consistent result.

        Returns:
            A future of the write's position token (:class:`Position`; the
            applied position when ``fn`` wrote nothing), or of
            ``reader(state)`` when a reader is given.

        Raises:
            TypeError: at the call, if ``fn`` is not callable.
            Exception: through the future, whatever ``fn`` or ``reader``
                raises, unchanged (nothing is written if ``fn`` raised).
            ValueError, TypeError: through the future, for an op that is no
                :class:`MapOp`, or a key or value the map refuses.
            StateClosedError, ForkedProcessError: at the call (module docstring: *Errors*).
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError: through the future.
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")

        def gen(state: dict[K, V]) -> list[MapOp[K, V]]:
            return self._codec.checked(fn(MappingProxyType(state)))

        if reader is None:
            written: Future[Position] = self.manager.write(gen)
            return written
        view_reader = reader

        def read(state: dict[K, V]) -> R:
            return view_reader(MappingProxyType(state))

        result: Future[R] = self.manager.write(gen, reader=read)
        return result

    # -- checkpoints ----------------------------------------------------------

    def checkpoint(self) -> Future[Manifest]:
        """Write a columnar checkpoint of the whole map now.

        Maps write one by themselves every ``CheckpointPolicy.every_ops``
        applied ops while they hold the topic; call this e.g. after a bulk
        load, so that the next bootstrap (and a Spark snapshot) reads the
        checkpoint instead of the load's messages.

        Returns:
            A future of the checkpoint's manifest (its position, keys, chunks).

        Raises:
            ConfigurationError: at the call, if the map keeps no checkpoints
                (``checkpoints=False``; by default also without pyarrow, an admin URL
                or ``ensure_retention``).
            ForkedProcessError: at the call (see *Errors* in the module docstring).
            PulsarStateError: through the future, when it could not be published
                (the map is unaffected; bootstrap uses an older one or the topic).
        """
        # the map's checkpoints are MapCheckpointer's: their record is a Manifest
        return cast("Future[Manifest]", self.manager.checkpoint())

    # -- watching -------------------------------------------------------------

    def watch(
        self,
        key_or_prefix: K | str | None,
        callback: Callable[[MapChange[K, V]], Any],
        from_position: Position | str | None = None,
        *,
        prefix: bool = False,
        timeout_s: float | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> MapWatch[K, V]:
        """Call ``callback(change)`` for every change of a key, in log order.

        ``key_or_prefix``: one key; with ``prefix=True`` every key whose string
        form starts with it; ``None``: every key. ``from_position`` (a token
        from a write, or ``str`` of one): the changes after it, history first;
        ``None``: from now. Each :class:`MapChange` has the key, the new value
        or ``deleted``, the value it replaced and the write's position. See
        :mod:`pulsar_state.map.watch` for order, threads and callback errors.
        ``max_pending``: the writes the watch may queue before it is ended as
        too far behind (its callback slower than the writes).

        Returns:
            The running :class:`MapWatch`; :meth:`MapWatch.stop` ends it (so
            does :meth:`close`).

        Raises:
            TypeError, ValueError: at the call, for a bad key, prefix, position
                or callback.
            Through :attr:`MapWatch.failure` (the watch stops, logged):
                OperationTimeoutError if the history after ``from_position`` is
                not read within ``timeout_s`` (default: four operation
                timeouts); StateTopicError if it cannot be read;
                WatchOverflowError when it fell ``max_pending`` writes behind
                (watch again with ``from_position=watch.position``: nothing is
                lost).
        """
        return self._watches.open(
            key_or_prefix,
            callback,
            from_position,
            prefix=prefix,
            timeout_s=timeout_s,
            max_pending=max_pending,
        )

    # -- lifecycle ------------------------------------------------------------

    def close(self) -> None:
        """Stop the watches, close the manager (idempotent); pending writes fail.

        Raises:
            ForkedProcessError: in a process forked after the map was made (a
                child must not close its parent's subscription).
        """
        self._watches.stop_all()
        self.manager.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[K]:
        return iter(self.list_keys().result())


def _explain_clear(count: int, exc: BaseException) -> NoReturn:
    """``clear()``'s write refused by the state core as larger than one write
    (before anything was written): the same error, saying so and what to do."""
    if isinstance(exc, TooManyOpsError):
        over = f"{count} deletes, over max_ops_per_write={exc.limit}"
    elif isinstance(exc, ValueTooLargeError):
        over = (
            f"{exc.size} bytes (each delete costs its key's length + {MESSAGE_OVERHEAD_BYTES}), "
            f"over max_write_bytes={exc.limit}"
        )
    else:
        raise exc
    exc.args = (
        f"clear() of {count} keys is one atomic write of {over}: nothing was deleted. "
        "Delete the keys in parts (transact() with a share of them per write: not "
        "atomic as a whole), or raise that limit (StateConfig; max_write_bytes up to "
        "the broker's maxMessageSize)",
    )
    raise exc
