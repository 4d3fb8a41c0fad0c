"""The metadata tree as a pure state machine (PIP-45 semantics).

Shared by the Pulsar-backed :class:`~pulsar_state.MetadataStore` (it is the
replicated state there) and the in-memory reference store, so both behave
alike by construction and one conformance suite checks both.

Paths are ``/``-separated, absolute, without empty, ``.`` or ``..`` segments.
A node has a value (bytes), a version (0 when created, +1 per change), creation
and modification times, and an optional ephemeral owner (a session id).
Children are listed like Pulsar's RocksDB and Oxia stores do: the distinct next
segments of every existing path below, whether or not the intermediate nodes
exist themselves.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pulsar_state.errors import BadVersionError, NotFoundError

__all__ = [
    "MAX_PATH_LENGTH",
    "GetResult",
    "MetaOp",
    "MetadataTree",
    "Notification",
    "NotificationType",
    "Record",
    "Stat",
    "parent_of",
    "validate_path",
]

MAX_PATH_LENGTH = 1024


class InvalidPathError(ValueError):
    """A metadata path that is not absolute, normalised and printable."""


def validate_path(path: str) -> str:
    """Return ``path`` if it is a valid metadata path, else raise ``ValueError``."""
    if not isinstance(path, str):
        raise TypeError(f"a path is a str, got {type(path).__name__}")
    if not path.startswith("/"):
        raise InvalidPathError(f"a path starts with '/': {path!r}")
    if len(path) > MAX_PATH_LENGTH:
        raise InvalidPathError(f"a path is at most {MAX_PATH_LENGTH} characters")
    if path == "/":
        return path
    if path.endswith("/"):
        raise InvalidPathError(f"a path does not end with '/': {path!r}")
    for segment in path[1:].split("/"):
        if segment in ("", ".", ".."):
            raise InvalidPathError(f"empty, '.' or '..' segment in {path!r}")
        if any(ord(c) < 32 or c == "\x7f" for c in segment):
            raise InvalidPathError(f"control character in {path!r}")
    if path.startswith("/__pss__"):
        raise InvalidPathError(f"paths under /__pss__ are reserved: {path!r}")
    return path


def parent_of(path: str) -> str | None:
    if path == "/":
        return None
    head = path.rsplit("/", 1)[0]
    return head or "/"


@dataclass(frozen=True, slots=True)
class Stat:
    """PIP-45's ``Stat``: what a node is, besides its value."""

    path: str
    version: int
    creation_timestamp: int  # ms since the epoch
    modification_timestamp: int
    ephemeral: bool
    owner: str | None = None  # the session that owns an ephemeral node
    token: int = 0  # the fencing token of the write that made this version


@dataclass(frozen=True, slots=True)
class GetResult:
    value: bytes
    stat: Stat


@dataclass(frozen=True, slots=True)
class Record:
    """A node as stored: its value and its stat."""

    value: bytes
    version: int
    ctime: int
    mtime: int
    owner: str | None = None
    token: int = 0  # grows with every write of any node (fencing)

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {
            "v": base64.b64encode(self.value).decode(),
            "ver": self.version,
            "c": self.ctime,
            "m": self.mtime,
            "t": self.token,
        }
        if self.owner is not None:
            body["o"] = self.owner
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Record:
        body = json.loads(data)
        if not isinstance(body, dict):
            raise ValueError("a metadata record is a JSON object")
        return cls(
            value=base64.b64decode(body["v"], validate=True),
            version=int(body["ver"]),
            ctime=int(body["c"]),
            mtime=int(body["m"]),
            owner=body.get("o"),
            token=int(body.get("t", 0)),
        )

    def stat(self, path: str) -> Stat:
        return Stat(
            path,
            self.version,
            self.ctime,
            self.mtime,
            self.owner is not None,
            self.owner,
            self.token,
        )


class NotificationType(Enum):
    CREATED = "created"
    MODIFIED = "modified"
    DELETED = "deleted"
    CHILDREN_CHANGED = "children_changed"


@dataclass(frozen=True, slots=True)
class Notification:
    type: NotificationType
    path: str


@dataclass(frozen=True, slots=True)
class MetaOp:
    """Set ``path`` to ``record``, or delete it (``record is None``)."""

    path: str
    record: Record | None


class MetadataTree:
    """Nodes plus a children index; every change goes through :meth:`apply`."""

    def __init__(self) -> None:
        self.nodes: dict[str, Record] = {}
        self._children: dict[str, Counter[str]] = {}

    # -- queries ----------------------------------------------------------------

    def get(self, path: str) -> GetResult | None:
        record = self.nodes.get(path)
        return None if record is None else GetResult(record.value, record.stat(path))

    def children(self, path: str) -> list[str]:
        counts = self._children.get(path)
        return sorted(counts) if counts else []

    def ephemeral_of(self, owner: str) -> list[str]:
        return sorted(p for p, r in self.nodes.items() if r.owner == owner)

    def owners(self) -> set[str]:
        return {r.owner for r in self.nodes.values() if r.owner is not None}

    # -- planning (on the latest state, inside a write's generator) ------------

    def plan_put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None,
        now_ms: int,
        *,
        owner: str | None = None,
        token: int = 0,
    ) -> MetaOp:
        """The op for a put, or ``BadVersionError``. ``-1``: must not exist."""
        current = self.nodes.get(path)
        actual = -1 if current is None else current.version
        if expected_version is not None and expected_version != actual:
            raise BadVersionError(path, expected=expected_version, actual=actual)
        if current is None:
            return MetaOp(path, Record(value, 0, now_ms, now_ms, owner, token))
        if owner is None:
            owner = current.owner
        return MetaOp(path, Record(value, current.version + 1, current.ctime, now_ms, owner, token))

    def plan_delete(
        self,
        path: str,
        expected_version: int | None,
        *,
        expected_owner: str | None = None,
        expected_token: int | None = None,
    ) -> MetaOp:
        """The op for a delete, or ``NotFoundError`` / ``BadVersionError``.

        ``expected_owner`` and ``expected_token`` make the delete conditional on
        the node still being the one a holder made: its owner session and the
        token of its write. A version alone cannot tell: a node deleted and
        made again by someone else starts at version 0 once more.
        """
        current = self.nodes.get(path)
        if current is None:
            raise NotFoundError(f"{path} does not exist")
        if expected_version is not None and expected_version != current.version:
            raise BadVersionError(path, expected=expected_version, actual=current.version)
        if (expected_owner is not None and expected_owner != current.owner) or (
            expected_token is not None and expected_token != current.token
        ):
            raise BadVersionError(
                path,
                expected=f"owner {expected_owner} token {expected_token}",
                actual=f"owner {current.owner} token {current.token}",
            )
        return MetaOp(path, None)

    # -- applying ---------------------------------------------------------------

    def apply(self, op: MetaOp) -> list[Notification]:
        """Change the tree; the notifications the change causes, in order."""
        existed = op.path in self.nodes
        if op.record is None:
            if not existed:
                return []
            del self.nodes[op.path]
            self._index(op.path, -1)
            return [Notification(NotificationType.DELETED, op.path), *self._parent_note(op.path)]
        self.nodes[op.path] = op.record
        if existed:
            return [Notification(NotificationType.MODIFIED, op.path)]
        self._index(op.path, +1)
        return [Notification(NotificationType.CREATED, op.path), *self._parent_note(op.path)]

    @staticmethod
    def _parent_note(path: str) -> list[Notification]:
        parent = parent_of(path)
        return [] if parent is None else [Notification(NotificationType.CHILDREN_CHANGED, parent)]

    def _index(self, path: str, delta: int) -> None:
        child = path
        parent = parent_of(child)
        while parent is not None:
            name = child.rsplit("/", 1)[1]
            counts = self._children.setdefault(parent, Counter())
            counts[name] += delta
            if counts[name] <= 0:
                del counts[name]
                if not counts:
                    del self._children[parent]
            child, parent = parent, parent_of(parent)
