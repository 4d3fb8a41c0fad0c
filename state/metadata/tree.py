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
    "MetaCodec",
    "MetaOp",
    "MetadataTree",
    "Notification",
    "NotificationType",
    "Record",
    "SessionEvent",
    "Stat",
    "parent_of",
    "validate_key",
    "validate_path",
    "validate_sequential_prefix",
    "validate_subtree",
]

MAX_PATH_LENGTH = 1024
SEQUENCE_DIGITS = 10  # the zero-padded suffix of a sequential node, as ZooKeeper's
_SEQ_KEY = "/__pss__/seq:"  # + parent path: the record of a parent's sequence counter


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
    if not path.isascii():
        try:
            path.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: no Pulsar message key
            raise InvalidPathError(f"a path is valid UTF-8 text: {path!r} ({exc.reason})") from None
    if path.startswith("/__pss__"):
        raise InvalidPathError(f"paths under /__pss__ are reserved: {path!r}")
    return path


def validate_key(key: str) -> str:
    """A topic key: a metadata path, or an internal sequence-counter key."""
    if isinstance(key, str) and key.startswith(_SEQ_KEY):
        validate_path(key[len(_SEQ_KEY) :])
        return key
    return validate_path(key)


def validate_sequential_prefix(prefix: str) -> str:
    """The prefix of a sequential put (``/queue/item-``), or ``ValueError``."""
    if isinstance(prefix, str) and prefix.endswith("/"):
        raise InvalidPathError(
            f"a sequential put takes a name prefix such as '/queue/item-', "
            f"not a path ending in '/': {prefix!r}"
        )
    validate_path(prefix)
    if len(prefix) + SEQUENCE_DIGITS > MAX_PATH_LENGTH:
        raise InvalidPathError(
            f"a sequential prefix is at most {MAX_PATH_LENGTH - SEQUENCE_DIGITS} characters"
        )
    return prefix


def validate_subtree(path: str) -> str:
    """The root of a recursive delete: a path other than ``/``, or ``ValueError``."""
    validate_path(path)
    if path == "/":
        raise InvalidPathError(
            "delete_recursive('/') would delete the whole store: delete the top-level paths"
        )
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


class SessionEvent(Enum):
    """What happens to a store's session, as PIP-45's ``SessionEvent``.

    ``CONNECTION_LOST``: the session's connection is down; its ephemeral nodes
    stay until the session timeout. ``RECONNECTED``: back within the timeout.
    ``SESSION_LOST``: down for the whole timeout: other stores may have deleted
    its ephemeral nodes (locks). ``SESSION_REESTABLISHED``: back after that.
    """

    CONNECTION_LOST = "connection_lost"
    RECONNECTED = "reconnected"
    SESSION_LOST = "session_lost"
    SESSION_REESTABLISHED = "session_reestablished"

    @property
    def healthy(self) -> bool:
        return self in (SessionEvent.RECONNECTED, SessionEvent.SESSION_REESTABLISHED)


@dataclass(frozen=True, slots=True)
class Notification:
    type: NotificationType
    path: str


@dataclass(frozen=True, slots=True)
class MetaOp:
    """Set ``path`` to ``record``, or delete it (``record is None``)."""

    path: str
    record: Record | None


class MetaCodec:
    """How the tree travels on its topic: path -> record bytes; an empty payload
    deletes (compactable). Both stores encode their writes with it: the Pulsar
    store to send them, the memory store to refuse what the topic would."""

    def encode(self, op: MetaOp) -> tuple[str | None, bytes]:
        return op.path, b"" if op.record is None else op.record.to_bytes()

    def decode(self, key: str, payload: bytes) -> MetaOp:
        validate_key(key)
        return MetaOp(key, Record.from_bytes(payload) if payload else None)

    def repair(self, tree: MetadataTree, keys: set[str]) -> list[MetaOp]:
        return [MetaOp(k, tree.record_of(k)) for k in sorted(keys)]


class MetadataTree:
    """Nodes plus a children index; every change goes through :meth:`apply`."""

    def __init__(self) -> None:
        self.nodes: dict[str, Record] = {}
        self._children: dict[str, Counter[str]] = {}
        # parent path -> the last sequence number handed out below it; kept in
        # the log as internal records, never decreases (a deleted parent too)
        self.sequences: dict[str, Record] = {}

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

    def record_of(self, key: str) -> Record | None:
        """The record stored under a topic key (a path or an internal key)."""
        if key.startswith(_SEQ_KEY):
            return self.sequences.get(key[len(_SEQ_KEY) :])
        return self.nodes.get(key)

    def subtree(self, path: str) -> list[str]:
        """``path`` and every existing path below it, deepest first."""
        below = path + "/"
        found = [p for p in self.nodes if p == path or p.startswith(below)]
        return sorted(found, key=lambda p: (-p.count("/"), p))

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

    def plan_sequential(
        self,
        prefix: str,
        value: bytes,
        now_ms: int,
        *,
        owner: str | None = None,
        token: int = 0,
    ) -> list[MetaOp]:
        """The ops of a sequential put: the parent's counter, then the node at
        ``prefix`` + the next number, zero-padded (one past any taken path)."""
        parent = parent_of(prefix)
        assert parent is not None
        counter = self.sequences.get(parent)
        n = 0 if counter is None else counter.version
        while True:
            n += 1
            path = f"{prefix}{n:0{SEQUENCE_DIGITS}d}"
            if path not in self.nodes:
                break
        ctime = now_ms if counter is None else counter.ctime
        return [
            MetaOp(_SEQ_KEY + parent, Record(b"", n, ctime, now_ms, None, token)),
            MetaOp(path, Record(value, 0, now_ms, now_ms, owner, token)),
        ]

    def plan_delete_recursive(self, path: str) -> list[MetaOp]:
        """The ops deleting ``path`` and everything below it, deepest first
        (none if nothing is there)."""
        return [MetaOp(p, None) for p in self.subtree(path)]

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
        """Change the tree; the notifications the change causes, in order.

        A node's creation or deletion notifies ``CHILDREN_CHANGED`` on its
        parent, then on every further ancestor whose list of children changed
        with it (intermediate nodes need not exist, so a deep create can add a
        child to several ancestors). Internal records notify nothing."""
        if op.path.startswith(_SEQ_KEY):
            parent = op.path[len(_SEQ_KEY) :]
            if op.record is None:
                self.sequences.pop(parent, None)
            else:
                self.sequences[parent] = op.record
            return []
        existed = op.path in self.nodes
        if op.record is None:
            if not existed:
                return []
            del self.nodes[op.path]
            changed = self._index(op.path, -1)
            return [Notification(NotificationType.DELETED, op.path), *self._parent_notes(changed)]
        self.nodes[op.path] = op.record
        if existed:
            return [Notification(NotificationType.MODIFIED, op.path)]
        changed = self._index(op.path, +1)
        return [Notification(NotificationType.CREATED, op.path), *self._parent_notes(changed)]

    @staticmethod
    def _parent_notes(parents: list[str]) -> list[Notification]:
        return [Notification(NotificationType.CHILDREN_CHANGED, p) for p in parents]

    def _index(self, path: str, delta: int) -> list[str]:
        """Count ``path`` in (or out of) its ancestors' children; the ancestors
        to notify: the parent, and each one whose set of children changed."""
        changed: list[str] = []
        child = path
        parent = parent_of(child)
        while parent is not None:
            name = child.rsplit("/", 1)[1]
            counts = self._children.setdefault(parent, Counter())
            before = counts[name]
            counts[name] += delta
            if counts[name] <= 0:
                del counts[name]
                if not counts:
                    del self._children[parent]
            if child == path or (before == 0) != (counts.get(name, 0) == 0):
                changed.append(parent)
            child, parent = parent, parent_of(parent)
        return changed
