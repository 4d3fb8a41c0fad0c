"""Positions in the state topic: comparable, printable, usable as tokens.

A :class:`Position` is a Pulsar message id reduced to what orders messages on a
non-partitioned topic: ``(ledger, entry, batch)``. ``write`` returns one as its
token; ``read(..., at_least=token)`` waits until local state has applied it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulsar

__all__ = ["Position"]


@dataclass(frozen=True, slots=True, order=False)
class Position:
    """A point in the state topic's log (``-1`` parts: before the first message)."""

    ledger: int
    entry: int
    batch: int = -1

    @classmethod
    def from_message_id(cls, msg_id: pulsar.MessageId) -> Position:
        """The position of a Pulsar message id (ledger, entry, batch index)."""
        return cls(msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index())

    @classmethod
    def parse(cls, token: str | Position) -> Position:
        """Read a token made by ``str(position)`` (a Position is returned as is).

        Raises:
            TypeError: for a token that is neither a str nor a Position.
            ValueError: for a str that is not ``ledger:entry:batch``.
        """
        if isinstance(token, Position):
            return token
        if not isinstance(token, str):
            raise TypeError(f"a position token is a str, got {type(token).__name__}")
        try:
            ledger, entry, batch = (int(part) for part in token.split(":"))
        except ValueError:
            raise ValueError(f"not a position token: {token!r}") from None
        return cls(ledger, entry, batch)

    @property
    def is_start(self) -> bool:
        """True for the position before any message (an empty topic's last id)."""
        return self.ledger < 0 or self.entry < 0

    # Compared on every message the tail brings: plain tuple comparisons, no
    # helper calls (``functools.total_ordering`` costs two calls per ``>``).
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return (self.ledger, self.entry, self.batch) < (other.ledger, other.entry, other.batch)

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return (self.ledger, self.entry, self.batch) <= (other.ledger, other.entry, other.batch)

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return (self.ledger, self.entry, self.batch) > (other.ledger, other.entry, other.batch)

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return (self.ledger, self.entry, self.batch) >= (other.ledger, other.entry, other.batch)

    def covers(self, target: Position) -> bool:
        """Whether having applied through ``self`` includes ``target``.

        A last-message id of a batch entry may carry ``batch=-1`` (the entry as a
        whole) or the index of its last message; reaching any message of a
        later entry, or the same entry's last message, covers it.
        """
        if target.is_start:
            return True
        if (self.ledger, self.entry) != (target.ledger, target.entry):
            return (self.ledger, self.entry) > (target.ledger, target.entry)
        return target.batch < 0 or self.batch >= target.batch

    def __str__(self) -> str:
        return f"{self.ledger}:{self.entry}:{self.batch}"


START = Position(-1, -1, -1)
