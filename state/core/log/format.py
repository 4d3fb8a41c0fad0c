"""The state topic's wire format (version 1).

Every write is **one Pulsar entry**: a batch of messages published by the
writer's exclusive producer and flushed at once, so readers see all of it or
none of it::

    entry := op* commit
    op     : key = the op's key (or a unique one), payload = the op's bytes,
             properties {"pss": "1", "pss.k": "op", "pss.w": <write id>, "pss.e": <epoch>}
    commit : key = "__pss__/commit",
             payload = JSON {"w": group id, "ws": [write ids], "n": #ops, "e": epoch},
             properties {"pss": "1", "pss.k": "commit", "pss.w": <group id>, "pss.e": <epoch>}

Concurrent writes share an entry (group commit): their ops carry the group's
id, and one commit marker names every write in it.

A write of a single op with a non-empty payload (a ``put``) is instead **one
self-committing message**: the op's key and payload with properties
``{"pss": "1", "pss.k": "write", "pss.w": <write id>, "pss.e": <epoch>}``. Half the
messages to build, send, receive and decode for the commonest write; it needs
no trailing marker (below), since a non-empty message is never compacted away
while it is the last of its key. An entry of one message (such a write, an
epoch marker) is sent outside the client's batch (see ``entry_sender``), so its
message id has batch index -1; readers take both forms alike.

When a writer gains the topic it appends an **epoch marker** (key
``"__pss__/epoch"``, properties ``{"pss": "1", "pss.k": "epoch"}``) and waits to
read it back before running any generator: everything before the marker is
older writers' work, nothing of theirs can land after it, and the marker's
position is the writer's fencing epoch.

Log-level fencing: the broker's ``ExclusiveWithFencing`` does not stop a write
the old producer had in flight from landing *after* the new writer's marker (seen
on Pulsar 4.0.8). So every reader applies a write only if its epoch is not older
than the newest epoch seen before it in the log; a stale write is skipped by
every reader alike, and its writer, seeing it skipped, re-runs it. A write
whose epoch is at or beyond its own position came through no epoch marker and is
skipped too, so that no message can raise the epoch past a real marker's. A stale op
could still be the last value of its key for compaction, so the writer that
holds the topic re-writes the current value of every key a stale write touched
("repair"). Keyless topics keep every marker (unique keys) instead.

Compaction safety: a keyed op (a map entry) is "last value wins", an empty
payload is a tombstone. Keyless ops get unique keys, so compaction keeps them.
Every entry ends with a marker or is one non-empty self-committing write, and
compaction keeps the latest marker of each kind and the latest non-empty value
of each key, so the topic's last message is never compacted away (a trailing
tombstone would otherwise make "caught up" unreachable for compacted readers). Keys under
``"__pss__/"`` are reserved; TableView readers should ignore them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = [
    "COMMIT_KEY",
    "EPOCH_KEY",
    "FORMAT_VERSION",
    "RESERVED_PREFIX",
    "Commit",
    "Kind",
    "OutgoingMessage",
    "check_op_key",
    "check_user_key",
    "check_value_key",
    "commit_message",
    "epoch_message",
    "op_message",
    "op_messages",
    "parse_commit",
    "write_message",
]

FORMAT_VERSION = "1"
PROP_FORMAT = "pss"
PROP_KIND = "pss.k"
PROP_WRITE = "pss.w"
PROP_EPOCH = "pss.e"
RESERVED_PREFIX = "__pss__/"
COMMIT_KEY = RESERVED_PREFIX + "commit"
EPOCH_KEY = RESERVED_PREFIX + "epoch"
#: bytes counted per message on top of key and payload (metadata, properties)
MESSAGE_OVERHEAD_BYTES = 96


class Kind:
    OP = "op"
    #: an op that is its own commit (a single-op write)
    WRITE = "write"
    COMMIT = "commit"
    EPOCH = "epoch"


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    key: str
    payload: bytes
    properties: dict[str, str]

    @property
    def size(self) -> int:
        return len(self.key) + len(self.payload) + MESSAGE_OVERHEAD_BYTES


@dataclass(frozen=True, slots=True)
class Commit:
    write_id: str
    count: int
    epoch: int
    members: tuple[str, ...] = ()


def check_user_key(key: str) -> str:
    """``key`` as a key of ours: a ``str`` that UTF-8 can encode (a Pulsar
    message key is UTF-8; a lone surrogate is not), not under the reserved
    prefix."""
    if not isinstance(key, str):
        raise TypeError(f"an op key is a str, got {type(key).__name__}")
    if key.startswith(RESERVED_PREFIX):
        raise ValueError(f"keys starting with {RESERVED_PREFIX!r} are reserved: {key!r}")
    if not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"a key must be valid UTF-8 text (a Pulsar message key is): {key!r} ({exc.reason})"
            ) from None
    return key


def check_value_key(key: str) -> str:
    """``key`` as the key of a value (not a delete): a user key, not empty.

    Pulsar has no empty message key: the client sends one as no key at all,
    and compaction drops messages without a key (PIP-318). A value under
    ``""`` would be applied by every reader of the raw topic and then vanish
    once the topic is compacted, so it is refused. (A delete of ``""`` is
    allowed: it removes such a value written before this check.)
    """
    check_user_key(key)
    if not key:
        raise ValueError(_EMPTY_KEY)
    return key


_EMPTY_KEY = (
    "a key must not be empty: Pulsar sends an empty key as no key, and "
    "compaction drops messages without a key"
)


def check_op_key(key: str, payload: bytes) -> str:
    """The key of an op: a value's (:func:`check_value_key`), or a delete's (empty
    ``payload``, :func:`check_user_key`)."""
    check_user_key(key)
    if payload and not key:
        raise ValueError(_EMPTY_KEY)
    return key


def _op_key(write_id: str, index: int, key: str | None) -> str:
    """The message key of an op whose key was checked: its own, or a unique one
    for a keyless op."""
    return f"{RESERVED_PREFIX}op/{write_id}/{index}" if key is None else key


def _checked_op_key(write_id: str, index: int, key: str | None, payload: bytes) -> str:
    if key is None:
        if not payload:
            raise ValueError("a keyless op must not serialize to empty bytes (a tombstone)")
        return _op_key(write_id, index, key)
    return check_op_key(key, payload)


def _op_properties(write_id: str, epoch: int, kind: str) -> dict[str, str]:
    return {
        PROP_FORMAT: FORMAT_VERSION,
        PROP_KIND: kind,
        PROP_WRITE: write_id,
        PROP_EPOCH: str(epoch),
    }


def op_message(
    write_id: str, index: int, key: str | None, payload: bytes, epoch: int, *, kind: str = Kind.OP
) -> OutgoingMessage:
    """One op's message, its key checked here (:func:`check_op_key`)."""
    key = _checked_op_key(write_id, index, key, payload)
    return OutgoingMessage(key, payload, _op_properties(write_id, epoch, kind))


def op_messages(
    write_id: str, ops: list[tuple[str | None, bytes]], epoch: int
) -> list[OutgoingMessage]:
    """The op messages of one entry; they share one (read-only) properties dict.

    The ops come from :func:`~pulsar_state.core.write.entry.encode_write`,
    which checked each write's keys (refusing that write alone); they are not
    checked again here."""
    props = _op_properties(write_id, epoch, Kind.OP)
    return [
        OutgoingMessage(_op_key(write_id, index, key), payload, props)
        for index, (key, payload) in enumerate(ops)
    ]


def write_message(write_id: str, key: str | None, payload: bytes, epoch: int) -> OutgoingMessage:
    """A whole single-op write in one message (its own commit); ``payload`` non-empty,
    the key checked as by :func:`op_messages`."""
    if not payload:
        raise ValueError("a self-committing write cannot be a tombstone: it needs a marker")
    return OutgoingMessage(
        _op_key(write_id, 0, key), payload, _op_properties(write_id, epoch, Kind.WRITE)
    )


def commit_message(
    write_id: str, count: int, epoch: int, *, keep: bool, members: list[str] | None = None
) -> OutgoingMessage:
    """``keep``: a unique key, so compaction keeps it (keyless topics)."""
    body = {"w": write_id, "ws": members or [write_id], "n": count, "e": epoch}
    payload = json.dumps(body, separators=(",", ":"))
    props = {
        PROP_FORMAT: FORMAT_VERSION,
        PROP_KIND: Kind.COMMIT,
        PROP_WRITE: write_id,
        PROP_EPOCH: str(epoch),
    }
    key = f"{COMMIT_KEY}/{write_id}" if keep else COMMIT_KEY
    return OutgoingMessage(key, payload.encode(), props)


def epoch_message(writer_id: str, acquisition: int, *, keep: bool) -> OutgoingMessage:
    """``keep``: a unique key, so compaction keeps it (keyless topics)."""
    payload = json.dumps({"writer": writer_id}, separators=(",", ":"))
    props = {PROP_FORMAT: FORMAT_VERSION, PROP_KIND: Kind.EPOCH, PROP_WRITE: writer_id}
    key = f"{EPOCH_KEY}/{writer_id}/{acquisition}" if keep else EPOCH_KEY
    return OutgoingMessage(key, payload.encode(), props)


def message_epoch(properties: dict[str, str]) -> int:
    """The writer epoch an op or commit carries (0 when absent or unreadable)."""
    try:
        return int(properties.get(PROP_EPOCH, "0"))
    except ValueError:
        return 0


def parse_commit(payload: bytes) -> Commit:
    """Decode a commit marker; ``ValueError`` if it is not one."""
    data: Any = json.loads(payload)
    if not isinstance(data, dict):
        raise ValueError("commit marker is not a JSON object")
    members = data.get("ws") or [data["w"]]
    if not isinstance(members, list):
        raise ValueError("commit marker members are not a list")
    return Commit(str(data["w"]), int(data["n"]), int(data.get("e", 0)), tuple(map(str, members)))


def epoch_of(ledger: int, entry: int) -> int:
    """The fencing epoch of an epoch marker at ``ledger:entry`` (increases with the log)."""
    return (ledger << 32) | (entry & 0xFFFFFFFF)
