"""A write's ops as the topic carries them: encoded and checked, then one entry.

Pure functions of the writer (state/core/write/writer.py):

- :func:`encode_write`: one write's ops, encoded, with every check that could
  refuse one of them made here, so that a bad op fails its own write, never
  the other writes of its group commit;
- :func:`entry_messages`: the messages of one entry (a lone single-op write is
  one self-committing message; anything else is its ops and a commit marker
  naming the writes it holds);
- :func:`own_entry`: the entry as the replay applies it at its
  acknowledgement (commit on ack).
"""

from __future__ import annotations

from typing import TypeVar

from pulsar_state import forks
from pulsar_state.config import StateConfig
from pulsar_state.core.log.format import (
    PROP_WRITE,
    OutgoingMessage,
    check_op_key,
    commit_message,
    op_messages,
    write_message,
)
from pulsar_state.core.log.replay import OwnEntry
from pulsar_state.core.op_codec import OpCodec
from pulsar_state.core.write.entry_sender import entry_size
from pulsar_state.errors import TooManyOpsError, ValueTooLargeError

__all__ = ["encode_write", "entry_messages", "own_entry"]

Op = TypeVar("Op")

#: one write's encoded ops: (key, payload)s, and their size in an entry
Encoded = tuple[list[tuple[str | None, bytes]], int]


def encode_write(codec: OpCodec[Op], ops: list[Op] | None, config: StateConfig) -> Encoded | None:
    """``ops`` encoded for the topic, with their size; ``None`` for no ops.

    Raises:
        TooManyOpsError, ValueTooLargeError: over ``max_ops_per_write`` or
            ``max_write_bytes``.
        ValueError: a key the topic cannot carry, or a keyless op that
            serializes to empty bytes (a reader could not tell it from a slot
            compaction emptied).
        Exception: what the codec raises.
    """
    if not ops:
        return None
    if len(ops) > config.max_ops_per_write:
        raise TooManyOpsError(len(ops), config.max_ops_per_write)
    out = [codec.encode(op) for op in ops]
    for key, payload in out:
        if key is not None:
            check_op_key(key, payload)
        elif not payload:
            raise ValueError(
                "an op without a key must not serialize to empty bytes: the topic "
                "could not tell it from a compacted-out slot"
            )
    size = entry_size(out)
    if size > config.max_write_bytes:
        raise ValueTooLargeError(size, config.max_write_bytes)
    return out, size


def entry_messages(
    writer_id: str,
    write_ids: list[str],
    ops: list[tuple[str | None, bytes]],
    epoch: int,
    compactable: bool,
) -> list[OutgoingMessage]:
    """The messages of one entry holding the writes ``write_ids`` (their ops in order)."""
    if len(write_ids) == 1 and len(ops) == 1 and ops[0][1]:
        # the commonest write (a put): one self-committing message
        key, payload = ops[0]
        return [write_message(write_ids[0], key, payload, epoch)]
    group_id = f"{writer_id}-g{forks.next_seq()}"
    messages = op_messages(group_id, ops, epoch)
    messages.append(
        commit_message(group_id, len(ops), epoch, keep=not compactable, members=write_ids)
    )
    return messages


def own_entry(messages: list[OutgoingMessage], write_ids: list[str], epoch: int) -> OwnEntry[Op]:
    """The entry as :meth:`~pulsar_state.core.log.replay.LogReplay.apply_own` takes it:
    the ops as every reader decodes them (by their message keys)."""
    op_msgs = messages if len(messages) == 1 else messages[:-1]
    return OwnEntry(
        [(m.key, m.payload) for m in op_msgs],
        write_id=messages[-1].properties.get(PROP_WRITE, ""),
        members=tuple(write_ids),
        epoch=epoch,
    )
