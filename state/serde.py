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

    def serialize(self, value: T) -> bytes:
        """The bytes of ``value`` (equal values should give equal bytes).

        Raises:
            TypeError: for a value this serde cannot hold.
        """
        ...

    def deserialize(self, data: bytes) -> T:
        """The value ``data`` holds.

        Raises:
            ValueError: for bytes that are no such value.
        """
        ...


class KeySerde(Protocol[T]):
    """Key <-> the ``str`` used as the Pulsar message key."""

    def to_key(self, key: T) -> str:
        """The message key of ``key``.

        Raises:
            TypeError: for a key this serde cannot hold.
        """
        ...

    def from_key(self, key: str) -> T:
        """The key a message key stands for.

        Raises:
            ValueError: for a message key that is no such key.
        """
        ...


_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, allow_nan=False)
_DECODER = json.JSONDecoder()


class JsonSerde(Generic[T]):
    """JSON values (the default). Non-JSON types raise ``TypeError`` on write."""

    def serialize(self, value: T) -> bytes:
        """Compact JSON with sorted keys, UTF-8.

        Raises:
            TypeError: for a value JSON cannot hold.
            ValueError: for NaN or infinity, or a circular structure.
        """
        return _ENCODER.encode(value).encode()

    def deserialize(self, data: bytes) -> T:
        """The JSON value ``data`` holds.

        Raises:
            ValueError: for bytes that are not UTF-8 JSON (malformed JSON or
                invalid UTF-8).
        """
        result: T = _DECODER.decode(data.decode())
        return result


class StrSerde:
    """UTF-8 text values."""

    def serialize(self, value: str) -> bytes:
        """``value`` as UTF-8.

        Raises:
            TypeError: for a value that is not a str.
        """
        if not isinstance(value, str):
            raise TypeError(f"StrSerde serializes str, got {type(value).__name__}")
        return value.encode()

    def deserialize(self, data: bytes) -> str:
        """The text ``data`` holds.

        Raises:
            ValueError: for bytes that are not UTF-8 (UnicodeDecodeError).
        """
        return data.decode()


class BytesSerde:
    """Raw bytes values, passed through."""

    def serialize(self, value: bytes) -> bytes:
        """``value`` itself, as bytes.

        Raises:
            TypeError: for a value that is not bytes-like.
        """
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"BytesSerde serializes bytes, got {type(value).__name__}")
        return bytes(value)

    def deserialize(self, data: bytes) -> bytes:
        """``data`` itself."""
        return data


class StrKeySerde:
    """``str`` keys, used as they are (the default)."""

    def to_key(self, key: str) -> str:
        """``key`` itself.

        Raises:
            TypeError: for a key that is not a str.
        """
        if not isinstance(key, str):
            raise TypeError(f"keys are str, got {type(key).__name__}: {key!r}")
        return key

    def from_key(self, key: str) -> str:
        """``key`` itself."""
        return key


def json_safe(value: Any) -> Any:
    """``value`` if JSON can hold it, else ``TypeError`` (eager check for puts)."""
    JsonSerde[Any]().serialize(value)
    return value
