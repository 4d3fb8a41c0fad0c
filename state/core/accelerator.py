"""What the core asks of a bootstrap accelerator: checkpoints of its state.

Replaying a state topic from its start costs its whole history. A recipe may
keep checkpoints of its state elsewhere (the map keeps columnar ones on a
companion topic, :class:`~pulsar_state.map.checkpoint.writer.MapCheckpointer`); the core
loads the newest at start, replays only the tail after it, and asks, after
each publish while it holds the topic, whether a new one is due. This module
is the whole contract: the core imports nothing of the map's.

Thread rules: :meth:`Checkpoints.due` is called without the state lock (a
racy look at counters); :meth:`Checkpoints.take` under the state lock, so it
must only copy what it needs and do its serializing and publishing on a thread
of its own; no blocking client call is made under the lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from pulsar_state.position import Position

__all__ = ["Checkpoint", "Checkpoints", "Loaded"]

S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)


class Checkpoint(Protocol):
    """What a written checkpoint tells the core (a map's ``Manifest`` is one)."""

    @property
    def position(self) -> Position:
        """The state topic's position the state was taken at."""
        ...


class Loaded(Protocol[S_co]):
    """A state read from a checkpoint, and what it covers."""

    @property
    def state(self) -> S_co: ...

    @property
    def position(self) -> Position:
        """The tail is replayed after this position."""
        ...

    @property
    def epoch(self) -> int:
        """The newest writer epoch seen at ``position``."""
        ...

    @property
    def stale_keys(self) -> Mapping[str, Position]:
        """Keys a stale write touched, not yet repaired when it was taken."""
        ...


class Checkpoints(Protocol[S]):
    """A store of checkpoints of one state topic's state."""

    #: the state topic's incarnation (PulsarAdmin.incarnation), set before load
    incarnation: str | None

    def load(self) -> Loaded[S] | None:
        """The newest usable checkpoint of this incarnation, or ``None``."""
        ...

    def counting_from(self, position: Position) -> None:
        """Ops applied after ``position`` count towards the next one."""
        ...

    def due(self, applied_ops: int, state: S) -> bool:
        """Whether one should be taken now (no lock held: counters only)."""
        ...

    @property
    def running(self) -> Future[Any] | None:
        """The one being written, if any."""
        ...

    def take(
        self,
        state: S,
        position: Position,
        epoch: int,
        stale_keys: dict[str, Position],
        applied_ops: int,
        *,
        automatic: bool = False,
    ) -> Future[Any]:
        """Start one of ``state`` as applied through ``position`` (under the
        state lock: copy, then write on a thread of its own). An
        ``automatic`` one may complete with ``None``, not written."""
        ...

    def close(self) -> None: ...
