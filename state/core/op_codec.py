"""How ops become messages: a key (or none) and a payload.

The generic manager (PIP-137's ``with_op_serializer``/``with_op_deserializer``)
uses :class:`SerializerCodec`: ops are keyless, so every op is kept by
compaction. Recipes whose ops are "last value per key wins" (the map) supply a
keyed codec; their empty payload is a tombstone and compaction shrinks them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["OpCodec", "RepairingCodec", "SerializerCodec"]

Op = TypeVar("Op")


class OpCodec(Protocol[Op]):
    def encode(self, op: Op) -> tuple[str | None, bytes]:
        """``(key or None, payload)`` for one op."""
        ...

    def decode(self, key: str, payload: bytes) -> Op:
        """The op back; raise ``ValueError``/``TypeError`` when it is not one."""
        ...


class RepairingCodec(OpCodec[Op], Protocol[Op]):
    """A keyed, last-value-wins codec that can re-assert the current value of keys.

    Used after a stale (fenced) write landed: the holder of the topic writes
    ``repair(state, keys)`` so that compaction never keeps the stale value.
    """

    def repair(self, state: Any, keys: set[str]) -> list[Op]: ...


class SerializerCodec(Generic[Op]):
    """Keyless ops through a pair of functions."""

    def __init__(
        self, serializer: Callable[[Op], bytes], deserializer: Callable[[bytes], Op]
    ) -> None:
        self._serializer = serializer
        self._deserializer = deserializer

    def encode(self, op: Op) -> tuple[str | None, bytes]:
        """``(None, serializer(op))``: a keyless message.

        Raises:
            TypeError: if the serializer returns no bytes.
            Exception: whatever the serializer raises, unchanged.
        """
        payload = self._serializer(op)
        if not isinstance(payload, bytes | bytearray):
            raise TypeError(f"the op serializer must return bytes, got {type(payload).__name__}")
        return None, bytes(payload)

    def decode(self, key: str, payload: bytes) -> Op:
        """``deserializer(payload)`` (the key is ignored).

        Raises:
            ValueError, TypeError: as the deserializer raises for a payload
                that is no op.
        """
        return self._deserializer(payload)
