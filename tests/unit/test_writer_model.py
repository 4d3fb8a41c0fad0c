"""The write side against a fault schedule at the producer boundary (issue #25).

Pure logic, no broker: the real :class:`~pulsar_state.core.write.writer.Writer`,
its :class:`~pulsar_state.core.write.tenure.Tenure` and the real log replay run
against a stand-in topic that keeps PIP-68's exclusive-producer rule and obeys a
schedule, drawn by hypothesis, for each entry sent and each producer made:

- ``ok``: stored and acknowledged;
- ``lost``: not stored, the ack times out (the client's send timeout);
- ``stored``: stored, the ack times out anyway (a broker paused past the send
  timeout): the outcome is unknown to the writer;
- ``refused``: not stored, refused;
- ``takeover``: before this entry another writer takes the topic (its epoch
  marker lands, our producer is fenced);
- ``stale``: another writer's marker lands but our producer is not told (the
  Pulsar 4.0.8 race): this entry is stored and acknowledged, after the marker;
- ``duplicate``: stored, and acknowledged at the position -1:-1, as a broker
  with deduplication on answers a message the client resent after losing the
  connection before the receipt (the first copy was stored).

Each write is an increment that records how many writes it saw on its key
(``claim``) or a blind put; the applier appends each to its key's list. The
properties, for every schedule:

1. every write completes (no hang);
2. a write that succeeded is in the log's state exactly once; one that failed
   is not in it at all (a failure is only reported once it is known not to
   have landed); one reported in doubt at most once;
3. every increment was built on the state that includes every write before it
   in the log: its claim equals its place in its key's list (a lost update, as
   in defect 1, breaks this);
4. a fresh replay of the whole log gives the writer's own state.

The guarantees themselves are proven on the real broker
(tests/integration/test_write_path_guarantees.py, tests/faults/); this test
explores many more schedules than a broker run can.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from concurrent.futures import Future
from typing import Any

import pulsar
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsar_state.config import StateConfig
from pulsar_state.core.callback_thread import CallbackThread
from pulsar_state.core.log.format import epoch_message
from pulsar_state.core.log.replay import LogReplay
from pulsar_state.core.op_codec import SerializerCodec
from pulsar_state.core.write.writer import Writer
from pulsar_state.errors import (
    InvalidMessageError,
    OperationTimeoutError,
    PulsarStateError,
    WriteInDoubtError,
)
from pulsar_state.position import Position
from pulsar_state.retry import RetryPolicy

TOPIC = "persistent://public/default/model"
Op = tuple[str, str, int | None]  # key, write's own id, claim (None: a blind put)
State = dict[str, list[tuple[str, int | None]]]

SEND_FAULTS = ("ok", "ok", "ok", "lost", "stored", "refused", "takeover", "stale", "duplicate")
CREATE_FAULTS = ("ok", "ok", "ok", "timeout")


class _Id:
    def __init__(self, ledger: int, entry: int, batch: int) -> None:
        self._pos = (ledger, entry, batch)

    def ledger_id(self) -> int:
        return self._pos[0]

    def entry_id(self) -> int:
        return self._pos[1]

    def batch_index(self) -> int:
        return self._pos[2]


class _Message:
    """A stored message as a reader gets it."""

    def __init__(self, native: Any, ledger: int, entry: int, batch: int) -> None:
        self._data = native.data()
        self._props = dict(native.properties())
        self._key = native.partition_key()
        self._id = _Id(ledger, entry, batch)

    def message_id(self) -> _Id:
        return self._id

    def properties(self) -> dict[str, str]:
        return self._props

    def partition_key(self) -> str:
        return self._key

    def data(self) -> bytes:
        return self._data

    def publish_timestamp(self) -> int:
        return 0


class _Broker:
    """One topic, exclusive producers (PIP-68), and the fault schedule."""

    def __init__(self, sends: list[str], creates: list[str]) -> None:
        self.lock = threading.Lock()
        self.log: list[_Message] = []
        self.holder: _Producer | None = None
        self._entry = 0
        self._sends = collections.deque(sends)
        self._creates = collections.deque(creates)
        self._foreign = 0

    def next_send(self) -> str:
        return self._sends.popleft() if self._sends else "ok"

    def store(self, natives: list[Any]) -> _Id:
        self._entry += 1
        if len(natives) == 1:
            self.log.append(_Message(natives[0], 1, self._entry, -1))
            return _Id(1, self._entry, -1)
        for i, native in enumerate(natives):
            self.log.append(_Message(native, 1, self._entry, i))
        return _Id(1, self._entry, len(natives) - 1)

    def foreign_marker(self) -> None:
        """Another writer gains the topic: its epoch marker lands."""
        self._foreign += 1
        marker = epoch_message(f"other{self._foreign}", 1, keep=True)
        native = _Native(marker.payload, marker.properties, marker.key)
        self.store([native])

    # -- the client's side -------------------------------------------------------

    def create_producer(self, topic: str, **_: Any) -> _Producer:
        with self.lock:
            if self._creates and self._creates.popleft() == "timeout":
                raise pulsar.Timeout("ResultTimeout")
            producer = _Producer(self)
            self.holder = producer  # fences the one before
            return producer


class _Native:
    def __init__(self, data: bytes, props: dict[str, str], key: str | None) -> None:
        self._d, self._p, self._k = data, props, key or ""

    def data(self) -> bytes:
        return self._d

    def properties(self) -> dict[str, str]:
        return self._p

    def partition_key(self) -> str:
        return self._k


#: what the native client raises for a refused blocking send
_RAISED: dict[Any, type[Exception]] = {
    pulsar.Result.Timeout: pulsar.Timeout,
    pulsar.Result.ProducerFenced: pulsar.ProducerFenced,
    pulsar.Result.ProducerBlockedQuotaExceededError: pulsar.ProducerBlockedQuotaExceededError,
}


class _Producer:
    """The exclusive producer, with the native send the entry sender uses."""

    def __init__(self, broker: _Broker) -> None:
        self._broker = broker
        self._producer = self  # the entry sender calls producer._producer.send(_async)
        self._pending: list[Any] = []
        self._callback: Any = None
        self._closed = False

    def send_async(self, native: Any, callback: Any) -> None:
        self._pending.append(native)
        if callback is not None:
            self._callback = callback
            if len(self._pending) == 1:  # a one-message entry: no flush follows
                self._complete()

    def send(self, native: Any) -> _Id:
        """The blocking send of a one-message entry: the answer, or the
        client's exception for a refusal (as the native client raises it)."""
        answers: list[tuple[Any, Any]] = []
        self._pending.append(native)
        self._callback = lambda result, msg_id: answers.append((result, msg_id))
        self._complete()
        result, msg_id = answers[0]
        if result != pulsar.Result.Ok:
            raise _RAISED[result](str(result))
        return msg_id  # type: ignore[no-any-return]

    def flush(self) -> None:
        if self._pending:
            self._complete()

    def _complete(self) -> None:
        natives, self._pending = self._pending, []
        callback, self._callback = self._callback, None
        broker = self._broker
        with broker.lock:
            fault = broker.next_send()
            if fault == "takeover":
                broker.foreign_marker()
                broker.holder = None
            elif fault == "stale":
                broker.foreign_marker()  # the holder is not told: ours lands stale
                msg_id = broker.store(natives)
                callback(pulsar.Result.Ok, msg_id)
                return
            if self._closed or broker.holder is not self:
                callback(pulsar.Result.ProducerFenced, None)
            elif fault == "lost":
                callback(pulsar.Result.Timeout, None)
            elif fault == "stored":
                broker.store(natives)
                callback(pulsar.Result.Timeout, None)
            elif fault == "duplicate":
                broker.store(natives)
                callback(pulsar.Result.Ok, _Id(-1, -1, -1))
            elif fault == "refused":
                callback(pulsar.Result.ProducerBlockedQuotaExceededError, None)
            else:
                callback(pulsar.Result.Ok, broker.store(natives))

    def is_connected(self) -> bool:
        return not self._closed

    def close(self) -> None:
        self._closed = True
        with self._broker.lock:
            if self._broker.holder is self:
                self._broker.holder = None


class _Tail(LogReplay[State, Op]):
    """The tailer's part the writer uses: a thread reads the log as it grows
    (as the real tailer receives), and a wait for a position not applied yet
    reads it at once."""

    def __init__(self, broker: _Broker, codec: SerializerCodec[Op]) -> None:
        super().__init__(topic=TOPIC, codec=codec, applier=_apply, state={})
        self._broker = broker
        self._read = 0
        self._reading = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.001):
            self._pump()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _pump(self) -> None:
        with self._reading:  # one reader at a time, in log order
            with self._broker.lock:
                messages = self._broker.log[self._read :]
                self._read = len(self._broker.log)
            for msg in messages:
                self.feed(msg)  # type: ignore[arg-type]
            self.flush()

    def wait_applied(self, target: Position, timeout_s: float) -> Position:
        if self.applied.covers(target):  # as the real tailer: no wait when covered
            return self.applied
        self._pump()
        if not self.applied.covers(target):
            raise OperationTimeoutError(f"not at {target}")
        return self.applied

    def catch_up(self, timeout_s: float) -> Position:
        self._pump()
        return self.applied


def _apply(state: State, op: Op) -> None:
    key, op_id, claim = op
    state.setdefault(key, []).append((op_id, claim))


def _codec() -> SerializerCodec[Op]:
    return SerializerCodec(lambda op: json.dumps(op).encode(), lambda data: tuple(json.loads(data)))


def _increment(key: str, op_id: str) -> Any:
    def generate(state: State) -> list[Op]:
        return [(key, op_id, len(state.get(key, ())) + 1)]

    return generate


def _writer(
    broker: _Broker, tail: _Tail, callbacks: CallbackThread, **config: Any
) -> Writer[State, Op]:
    """The real writer on the stand-in topic (fencing mode, short timeouts)."""
    writer: Writer[State, Op] = Writer(
        client=broker,  # type: ignore[arg-type]
        topic=TOPIC,
        tailer=tail,  # type: ignore[arg-type]
        codec=tail._codec,
        config=StateConfig(
            access_mode="fencing",
            max_takeovers_per_s=None,
            operation_timeout_s=2.0,
            send_timeout_s=1.0,
            ensure_retention=False,
            **config,
        ),
        callbacks=callbacks,
    )
    return writer


ops_strategy = st.lists(
    st.tuples(st.sampled_from(["incr", "put"]), st.sampled_from(["a", "b"])),
    min_size=1,
    max_size=25,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=ops_strategy,
    sends=st.lists(st.sampled_from(SEND_FAULTS), max_size=30),
    creates=st.lists(st.sampled_from(CREATE_FAULTS), max_size=6),
    waves=st.integers(min_value=1, max_value=3),
)
def test_every_schedule_keeps_the_write_guarantees(
    ops: list[tuple[str, str]], sends: list[str], creates: list[str], waves: int
) -> None:
    broker = _Broker(sends, creates)
    codec = _codec()
    tail = _Tail(broker, codec)
    callbacks = CallbackThread("pss-callbacks-model")
    writer = _writer(
        broker,
        tail,
        callbacks,
        retry=RetryPolicy(
            max_attempts=40, deadline_s=30, initial_backoff_s=0.001, max_backoff_s=0.002
        ),
    )
    made: list[tuple[str, str, Future[Position]]] = []
    try:
        size = max(1, len(ops) // waves)
        for start in range(0, len(ops), size):
            for n, (kind, key) in enumerate(ops[start : start + size], start):
                op_id = f"op{n}"
                if kind == "incr":
                    made.append((op_id, key, writer.submit(_increment(key, op_id))))
                else:
                    made.append(
                        (
                            op_id,
                            key,
                            writer.submit(lambda _s, k=key, i=op_id: [(k, i, None)], blind=True),
                        )
                    )
            for _, _, fut in made[start:]:
                fut.exception(timeout=30)  # 1. nothing hangs
    finally:
        writer.close()
        callbacks.close()
        tail.close()
    tail.catch_up(1.0)
    state = tail.state
    landed = collections.Counter(op_id for entries in state.values() for op_id, _ in entries)
    for op_id, _key, fut in made:
        error = fut.exception()
        if error is None:  # 2. a success is there exactly once
            assert landed[op_id] == 1, (op_id, landed[op_id], sends, creates)
        elif isinstance(error, WriteInDoubtError):  # ... one in doubt at most once
            assert landed[op_id] <= 1, (op_id, error, sends, creates)
        else:  # ... a failure not at all
            assert isinstance(error, PulsarStateError), error
            assert landed[op_id] == 0, (op_id, error, sends, creates)
    for key, entries in state.items():  # 3. no increment built on stale state
        for place, (_op_id, claim) in enumerate(entries, 1):
            assert claim is None or claim == place, (key, entries, sends, creates)
    fresh = LogReplay(topic=TOPIC, codec=codec, applier=_apply, state={})
    for msg in broker.log:
        fresh.feed(msg)  # type: ignore[arg-type]
    fresh.flush()
    assert fresh.state == state  # 4. the log says what the writer's state says


def test_a_replay_stopping_while_close_waits_behind_a_group_completes_every_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``close()`` queued behind a group of blind writes (its marker waits in the
    writer's front queue) while the replay stops (``on_invalid_message="fail"``)
    during the group's send: every write still completes (the group's two in
    doubt, as they were sent and never applied) and the writer thread ends.
    Before, ending the writer tripped over the close marker: the writer thread
    died, and the sent writes stayed pending."""
    from pulsar_state.core.write import writer as writer_module  # noqa: PLC0415

    broker = _Broker([], [])
    tail = _Tail(broker, _codec())
    callbacks = CallbackThread("pss-callbacks-model")
    sent: list[int] = []
    queued = threading.Event()
    send_entry = writer_module.send_entry

    def stopping_send(producer: Any, messages: Any, acks: Any, *, timeout_s: float) -> Position:
        sent.append(len(messages))
        if len(sent) == 1:  # the first write: the group and close() queue up meanwhile
            queued.wait(30)
        if len(sent) == 2:  # the group: the replay meets an invalid message
            tail._stop.set()
            tail._thread.join()  # it reads no more
            tail.failure = InvalidMessageError("bad", position="9:9:-1")
            landed = send_entry(producer, messages, acks, timeout_s=timeout_s)
            assert tail.on_stopped is not None
            tail.on_stopped()
            return landed
        return send_entry(producer, messages, acks, timeout_s=timeout_s)

    monkeypatch.setattr(writer_module, "send_entry", stopping_send)
    writer = _writer(broker, tail, callbacks, commit_on_ack=False)
    try:
        first = writer.submit(_increment("a", "A"))
        wait_for(lambda: sent)
        group = [writer.submit(None, ops=[("b", f"B{n}", None)]) for n in (1, 2)]
        closer = threading.Thread(target=writer.close)
        closer.start()
        wait_for(lambda: writer._closed)
        queued.set()
        closer.join(30)
        for fut in [first, *group]:
            fut.exception(timeout=10)  # done: no write left pending
        assert not writer._thread.is_alive()
        for fut in group:
            assert isinstance(fut.exception(), WriteInDoubtError | InvalidMessageError)
    finally:
        queued.set()
        callbacks.close()
        tail.close()


def wait_for(condition: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)
