"""Serializers for keys and values: small, explicit, pluggable.

A :class:`Serde` turns a Python value into bytes and back. Keys go into the
Pulsar message key, so a key serde produces ``str``. Values default to JSON
(UTF-8, compact, sorted keys: equal values give equal bytes).
"""

from __future__ import annotations

import json
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["BytesSerde", "JsonSerde", "KeySerde", "Serde", "StrKeySerde", "StrSerde"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Serde(Protocol[T]):
    """Value <-> bytes. ``deserialize`` raises ``ValueError`` on bad input."""

    def serialize(self, value: T) -> bytes: ...

    def deserialize(self, data: bytes) -> T: ...


class KeySerde(Protocol[T]):
    """Key <-> the ``str`` used as the Pulsar message key."""

    def to_key(self, key: T) -> str: ...

    def from_key(self, key: str) -> T: ...


_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, allow_nan=False)
_DECODER = json.JSONDecoder()


class JsonSerde(Generic[T]):
    """JSON values (the default). Non-JSON types raise ``TypeError`` on write."""

    def serialize(self, value: T) -> bytes:
        return _ENCODER.encode(value).encode()

    def deserialize(self, data: bytes) -> T:
        result: T = _DECODER.decode(data.decode())
        return result


class StrSerde:
    """UTF-8 text values."""

    def serialize(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise TypeError(f"StrSerde serializes str, got {type(value).__name__}")
        return value.encode()

    def deserialize(self, data: bytes) -> str:
        return data.decode()


class BytesSerde:
    """Raw bytes values, passed through."""

    def serialize(self, value: bytes) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"BytesSerde serializes bytes, got {type(value).__name__}")
        return bytes(value)

    def deserialize(self, data: bytes) -> bytes:
        return data


class StrKeySerde:
    """``str`` keys, used as they are (the default)."""

    def to_key(self, key: str) -> str:
        if not isinstance(key, str):
            raise TypeError(f"keys are str, got {type(key).__name__}: {key!r}")
        return key

    def from_key(self, key: str) -> str:
        return key


def json_safe(value: Any) -> Any:
    """``value`` if JSON can hold it, else ``TypeError`` (eager check for puts)."""
    JsonSerde[Any]().serialize(value)
    return value
