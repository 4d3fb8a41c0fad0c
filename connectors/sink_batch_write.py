"""A batch of records in one transaction of the SQL sink, effectively once.

:meth:`~.sink.SqlUpsertSink.write_batch` hands the batch to
:meth:`~.sql_backend.SqlBackend.apply_batch`, which locks and reads each
topic's stored position and asks :func:`write_batch`'s check, per topic,
inside the transaction, before anything is written:

* the batch's first record of the topic at or before the stored position: a
  redelivery (the records up to the stored position change nothing) unless the
  stored position is of another incarnation of the topic
  (:meth:`~.topic_incarnation.PositionGuard.is_redelivery`), which is then
  replaced: every record of the topic is applied;
* the first record past the stored position, when that position was stored by
  another writer: the takeover-gap check of :meth:`~.sink.SqlUpsertSink.gap_check`
  on it (the batch's later records of the topic follow it from the same
  consumer). A gap raises :class:`~.sink.TakeoverGapError` and rolls the whole
  transaction back; a gap after a position of another incarnation proves nothing.

So one transaction writes the batch's rows and each topic's last position (and
its batch size); a crash before the commit leaves nothing of the batch, and
its redelivery is written whole; after the commit, all of it is skipped.
"""

from __future__ import annotations

from pulsar_state.connectors.sink import SinkRecord, SqlUpsertSink, TakeoverGapError
from pulsar_state.connectors.sql_backend import Change
from pulsar_state.connectors.topic_incarnation import TopicIncarnationError
from pulsar_state.position import Position
from pulsar_state.scheduling.in_order import first_missing

__all__ = ["record_change", "write_batch"]


def record_change(sink: SqlUpsertSink, record: SinkRecord) -> Change:
    """What ``record`` does to its row (:meth:`~.sink.SqlUpsertSink.row`).

    Raises:
        PoisonRecordError: a record that can never become a row.
    """
    row = sink.row(record)
    assert isinstance(record.key, str)
    return Change(record.topic, record.position, record.key, row, record.batch_size)


def write_batch(
    sink: SqlUpsertSink, changes: list[Change], *, past_gap: frozenset[str] = frozenset()
) -> list[bool]:
    """Apply ``changes`` (:func:`record_change`, or position-only ones of records that
    can never be rows) in one transaction; for each, whether it was applied (see the
    module docstring). ``past_gap``: topics whose gap the caller waited out.

    Returns:
        Per change: ``True`` applied, ``False`` a redelivery.

    Raises:
        TakeoverGapError: nothing written; the topic's records are to be held.
        TopicIncarnationError: the stored position could not be checked (retriable)
            or is of another incarnation under ``positionMismatch: fail``.
        SinkDatabaseError: the database failed; nothing written.
    """
    guard = sink._guard
    assert guard is not None

    def check(
        topic: str, positions: list[Position], marker: tuple[Position, int | None] | None
    ) -> Position | None:
        if marker is None:
            return None
        stored, size = marker
        if not positions[0] > stored and not guard.is_redelivery(topic, positions[0], stored):
            return None  # of another incarnation: replaced, everything applied
        ahead = next((p for p in positions if p > stored), None)
        if ahead is None or topic in past_gap or stored == sink._own.get(topic):
            return stored
        missing = first_missing(stored, ahead, size)
        if missing is None:
            return stored
        try:
            foreign = guard.is_of_topic(topic, stored) is False
        except TopicIncarnationError:  # the admin API did not answer: hold
            foreign = False
        if foreign:
            return None
        raise TakeoverGapError(topic, ahead, stored, missing, size)

    with sink._lock:
        applied = sink.backend.apply_batch(sink.table, changes, check, layout=sink.layout)
        for change, done in zip(changes, applied, strict=True):
            if done:
                sink._own[change.topic] = change.position
    rows = [done for change, done in zip(changes, applied, strict=True) if change.row is not None]
    sink.written += sum(rows)
    sink.skipped += len(rows) - sum(rows)
    return applied
