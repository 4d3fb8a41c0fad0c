"""The map's op (:class:`MapOp`) and how it travels: its codec and its applier.

A :class:`~pulsar_state.PulsarMap` topic is a plain keyed, compactable topic:
the message key is the map key, the payload the serialized value, an empty
payload deletes. ``MapCodec`` turns ops into such messages and back (and
re-asserts keys after a stale write, for compaction); ``apply_map_op`` applies one
op to the state dict. Readers of a map topic that are no map (the read-only
CLI, the queryable-state function, the Spark source) use the same two.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from pulsar_state.core.log.format import check_user_key, check_value_key
from pulsar_state.serde import KeySerde, Serde

__all__ = ["MapCodec", "MapOp", "apply_map_op", "copy_value"]

K = TypeVar("K")
V = TypeVar("V")


_DELETE: Any = object()


class MapOp(Generic[K, V]):
    """Set ``key`` to ``value``, or delete it (``value is MapOp.DELETE``).

    The map's own op: :meth:`PulsarMap.transact` takes them, listeners of the
    map's manager get them. Build them with :meth:`put` and :meth:`delete`.
    """

    DELETE: Any = _DELETE
    __slots__ = ("key", "payload", "value")

    def __init__(self, key: K, value: Any, payload: bytes = b"") -> None:
        self.key = key
        self.value = value
        self.payload = payload

    @classmethod
    def put(cls, key: K, value: V) -> MapOp[K, V]:
        """The op that sets ``key`` to ``value``."""
        return cls(key, value)

    @classmethod
    def delete(cls, key: K) -> MapOp[K, V]:
        """The op that removes ``key`` (nothing if it is absent)."""
        return cls(key, _DELETE)

    @property
    def is_delete(self) -> bool:
        """True for a delete op (:meth:`delete`), False for a put."""
        return self.value is _DELETE

    def __repr__(self) -> str:
        return f"MapOp.delete({self.key!r})" if self.is_delete else f"MapOp.put({self.key!r}, ...)"


class MapCodec(Generic[K, V]):
    def __init__(self, key_serde: KeySerde[K], value_serde: Serde[V]) -> None:
        self.key_serde = key_serde
        self.value_serde = value_serde

    def put_op(self, key: K, value: V) -> MapOp[K, V]:
        """A put, validated and serialized now: a bad key or value fails at the call."""
        check_value_key(self.key_serde.to_key(key))
        payload = self.value_serde.serialize(value)
        if not payload:
            raise ValueError("a value must not serialize to empty bytes (that means delete)")
        return MapOp(key, value, payload)

    def delete_op(self, key: K) -> MapOp[K, V]:
        """A delete, its key validated now."""
        check_user_key(self.key_serde.to_key(key))
        return MapOp(key, _DELETE)

    def checked(self, ops: Iterable[MapOp[K, V]] | None) -> list[MapOp[K, V]]:
        """A user's ops (``transact``), each validated and serialized as by :meth:`put_op`."""
        out: list[MapOp[K, V]] = []
        for op in ops or ():
            if not isinstance(op, MapOp):
                raise TypeError(
                    f"transact takes MapOp.put(...)/MapOp.delete(...), got {type(op).__name__}"
                )
            out.append(self.delete_op(op.key) if op.is_delete else self.put_op(op.key, op.value))
        return out

    def encode(self, op: MapOp[K, V]) -> tuple[str | None, bytes]:
        """The op's (message key, payload); the key was checked when the op was
        made (:meth:`put_op`, :meth:`delete_op`), and the core checks it again
        for the topic (:func:`~pulsar_state.core.write.entry.encode_write`)."""
        value = op.value
        return self.key_serde.to_key(op.key), (b"" if value is _DELETE else op.payload)

    def repair(self, state: dict[K, V], keys: set[str]) -> list[MapOp[K, V]]:
        """Ops that re-assert the current value (or absence) of ``keys``."""
        ops: list[MapOp[K, V]] = []
        for raw in sorted(keys):
            key = self.key_serde.from_key(raw)
            if key in state and not raw:
                continue  # a value under "" (written before it was refused) has no key to repair
            if key in state:
                value = state[key]
                ops.append(MapOp(key, value, self.value_serde.serialize(value)))
            else:
                ops.append(MapOp(key, _DELETE))
        return ops

    def decode(self, key: str, payload: bytes) -> MapOp[K, V]:
        user_key = self.key_serde.from_key(key)
        if not payload:
            return MapOp(user_key, _DELETE)
        return MapOp(user_key, self.value_serde.deserialize(payload), payload)


def apply_map_op(state: dict[Any, Any], op: MapOp[Any, Any]) -> None:
    if op.is_delete:
        state.pop(op.key, None)
    else:
        state[op.key] = op.value


def copy_value(value: Any) -> Any:
    """A copy of a mutable value handed to a user's function (it may change it)."""
    return copy.deepcopy(value) if isinstance(value, dict | list | set | bytearray) else value
