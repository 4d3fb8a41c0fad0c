"""A code package as the package store keeps it: chunks and a manifest, :class:`PackageManifest`.

``pulsar-state functions create --py FILE`` uploads the file's bytes into the
worker group's package store (:mod:`~pulsar_state.functions.package_store`),
**content-addressed**: the package is named by the sha256 of its bytes,
``pss://sha256/<hex>`` (:func:`package_url`), and that name is what the
function's record holds (``package``). The bytes are split into chunks of at
most :data:`CHUNK_BYTES` (:func:`split_chunks`), each one message keyed
``sha256/<hex>/chunk/<i>`` (:func:`chunk_key`), and **then** a manifest
keyed ``sha256/<hex>`` (:func:`manifest_key`) names the digest, the size,
the chunk size and the number of chunks. A package is complete only when its
manifest is there and its chunks, put together (:func:`assemble`), have the
manifest's count, size and digest: a reader never takes chunks without a
manifest, or a manifest whose chunks are missing or altered, for a package.

This module is the logic alone (no I/O): the store writes and reads the
messages, the cache (:mod:`~pulsar_state.functions.package_cache`) keeps
what was fetched.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from pulsar_state.errors import ConfigurationError, NotFoundError, PulsarStateError

__all__ = [
    "CHUNK_BYTES",
    "MAX_PACKAGE_BYTES",
    "PACKAGE_SCHEME",
    "PackageCorruptError",
    "PackageManifest",
    "PackageNotFoundError",
    "PackageTooLargeError",
    "assemble",
    "chunk_key",
    "check_size",
    "digest_of",
    "manifest_key",
    "package_url",
    "parse_package_url",
    "split_chunks",
    "valid_file_name",
]

#: what a package's name in a record starts with; the sha256 in hex follows
PACKAGE_SCHEME = "pss://sha256/"
#: the largest code package the store takes (a bigger file is refused at the call)
MAX_PACKAGE_BYTES = 64 * 1024 * 1024
#: the largest chunk: a quarter of a state write's default limit (``max_write_bytes``,
#: 4 MiB) and well under the broker's ``maxMessageSize`` (5 MB by default)
CHUNK_BYTES = 1024 * 1024
#: the manifest's format (a manifest of another is refused)
FORMAT = 1

_HEX = re.compile(r"^[0-9a-f]{64}$")
_FILE_NAME = re.compile(r"^[^/\\\x00]+\.(py|zip)$")


class PackageNotFoundError(NotFoundError):
    """The package store has no complete package of that digest (no manifest)."""


class PackageCorruptError(PulsarStateError):
    """A package's chunks do not make the package its manifest names (a chunk
    missing or altered, a bad manifest): refused, never run."""


class PackageTooLargeError(ConfigurationError):
    """A code package over :data:`MAX_PACKAGE_BYTES`."""


def digest_of(data: bytes) -> str:
    """The sha256 of ``data`` in hex: a package's name."""
    return hashlib.sha256(data).hexdigest()


def package_url(digest: str) -> str:
    """``pss://sha256/<digest>``: the package as a record names it.

    Raises:
        ValueError: ``digest`` is not 64 lowercase hex digits.
    """
    if not _HEX.match(digest):
        raise ValueError(f"a package digest is 64 lowercase hex digits, got {digest!r}")
    return PACKAGE_SCHEME + digest


def parse_package_url(url: str) -> str:
    """The digest a ``pss://sha256/<hex>`` URL names.

    Returns:
        the 64 hex digits.

    Raises:
        ValueError: ``url`` is not such a URL.
    """
    if not isinstance(url, str) or not url.startswith(PACKAGE_SCHEME):
        raise ValueError(f"a package is {PACKAGE_SCHEME}<64 hex digits>, got {url!r}")
    digest = url.removeprefix(PACKAGE_SCHEME)
    if not _HEX.match(digest):
        raise ValueError(f"a package is {PACKAGE_SCHEME}<64 hex digits>, got {url!r}")
    return digest


def valid_file_name(name: object) -> bool:
    """Whether ``name`` is a package's file name: no folder, ending ``.py`` or ``.zip``."""
    return isinstance(name, str) and not name.startswith(".") and bool(_FILE_NAME.match(name))


def manifest_key(digest: str) -> str:
    """The message key of a package's manifest."""
    return f"sha256/{digest}"


def chunk_key(digest: str, index: int) -> str:
    """The message key of a package's chunk ``index`` (from 0)."""
    return f"sha256/{digest}/chunk/{index}"


def check_size(size: int, what: str) -> None:
    """Refuse a package over :data:`MAX_PACKAGE_BYTES`.

    Raises:
        PackageTooLargeError: ``size`` is over the limit (``what`` names the package).
    """
    if size > MAX_PACKAGE_BYTES:
        raise PackageTooLargeError(
            f"code package {what} is {size:,} bytes, over the package store's limit of "
            f"{MAX_PACKAGE_BYTES:,} bytes ({MAX_PACKAGE_BYTES // (1024 * 1024)} MiB)"
        )


def split_chunks(data: bytes, chunk_bytes: int = CHUNK_BYTES) -> list[bytes]:
    """``data`` in chunks of at most ``chunk_bytes`` (an empty package is one empty chunk).

    Returns:
        the chunks, in order.

    Raises:
        ValueError: ``chunk_bytes`` is not positive.
    """
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes!r}")
    return [data[i : i + chunk_bytes] for i in range(0, len(data), chunk_bytes)] or [b""]


@dataclass(frozen=True)
class PackageManifest:
    """What makes a package complete: its digest, size, chunk size and chunk count."""

    digest: str
    size: int
    chunks: int
    chunk_bytes: int

    @classmethod
    def of(cls, data: bytes, chunk_bytes: int = CHUNK_BYTES) -> PackageManifest:
        """The manifest of ``data`` split by :func:`split_chunks`."""
        return cls(digest_of(data), len(data), len(split_chunks(data, chunk_bytes)), chunk_bytes)

    @property
    def url(self) -> str:
        return package_url(self.digest)

    def to_bytes(self) -> bytes:
        """The manifest message's payload (JSON)."""
        return json.dumps(
            {
                "format": FORMAT,
                "digest": self.digest,
                "size": self.size,
                "chunks": self.chunks,
                "chunkBytes": self.chunk_bytes,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_bytes(cls, payload: bytes, digest: str) -> PackageManifest:
        """The manifest in a message keyed by ``digest``'s :func:`manifest_key`.

        Returns:
            the manifest, checked: its own fields agree with each other and with ``digest``.

        Raises:
            PackageCorruptError: it is not such a manifest.
        """
        try:
            fields = json.loads(payload)
            manifest = cls(
                str(fields["digest"]),
                int(fields["size"]),
                int(fields["chunks"]),
                int(fields["chunkBytes"]),
            )
            well_formed = fields.get("format") == FORMAT
        except (ValueError, TypeError, KeyError) as exc:
            raise PackageCorruptError(
                f"package {PACKAGE_SCHEME}{digest}: its manifest is unreadable ({exc})"
            ) from exc
        expected = -(-manifest.size // manifest.chunk_bytes) if manifest.chunk_bytes > 0 else -1
        if (
            not well_formed
            or manifest.digest != digest
            or manifest.size < 0
            or manifest.chunk_bytes <= 0
            or manifest.chunks != max(1, expected)
        ):
            raise PackageCorruptError(
                f"package {PACKAGE_SCHEME}{digest}: its manifest does not add up ({fields!r})"
            )
        return manifest


def assemble(manifest: PackageManifest, chunks: Mapping[int, bytes]) -> bytes:
    """The package's bytes from its chunks, checked against its manifest.

    ``chunks``: chunk index -> bytes, as read (others than the manifest's are ignored).

    Returns:
        the bytes, whose size and sha256 are the manifest's.

    Raises:
        PackageCorruptError: a chunk is missing or of the wrong size, or the bytes'
            size or digest is not the manifest's.
    """
    name = manifest.url
    missing = [i for i in range(manifest.chunks) if i not in chunks]
    if missing:
        raise PackageCorruptError(
            f"package {name}: chunk(s) {missing[:5]} of {manifest.chunks} missing from the store"
        )
    parts = [chunks[i] for i in range(manifest.chunks)]
    for index, part in enumerate(parts):
        last = index == manifest.chunks - 1
        if len(part) > manifest.chunk_bytes or (not last and len(part) != manifest.chunk_bytes):
            raise PackageCorruptError(
                f"package {name}: chunk {index} is {len(part)} bytes, not the manifest's "
                f"{manifest.chunk_bytes}"
            )
    data = b"".join(parts)
    if len(data) != manifest.size:
        raise PackageCorruptError(
            f"package {name}: {len(data)} bytes, the manifest says {manifest.size}"
        )
    found = digest_of(data)
    if found != manifest.digest:
        raise PackageCorruptError(
            f"package {name}: digest mismatch, its chunks hash to sha256 {found}; "
            "a chunk was altered: refused"
        )
    return data
