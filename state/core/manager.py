"""SharedStateManager: a replicated state machine on one Pulsar topic (PIP-137).

Every manager on a topic holds the same state: a database object made by the
*initializer*, changed only by the *applier*, one op at a time, in the topic's
order. ``write`` runs a generator against the latest state and publishes the
ops it returns as one atomic write; ``read`` runs a function against the local
state, optionally after catching up with the topic (``latest=True``) or with a
given write (``at_least=token``).

Futures core: every call returns a :class:`concurrent.futures.Future`; block
with ``.result()``, or ``await`` through :mod:`pulsar_state.aio`.

Thread safety: the state is only touched under the manager's lock, by the
tailer and the writer (applying) and by generators and readers (reading).
Generators and readers run under that lock, on whichever thread needs them:
they must be short, must not block on this manager, and must not keep
references to the state past their return.

Threads (docs/state.md, *Threads*): the tailer, the writer and the client's IO
thread never run a user's callback. Every done-callback added to a future this
manager returned, and every listener, runs on the manager's callback thread
(``pss-callbacks-<topic>``), in the order the writes landed; that thread does
nothing else, so a callback may wait on this very manager.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

import pulsar

from pulsar_state import forks, metrics
from pulsar_state.cluster.admin import PulsarAdmin
from pulsar_state.cluster.endpoint import AdminEndpoint, resolve_admin
from pulsar_state.config import StateConfig
from pulsar_state.core import futures
from pulsar_state.core.accelerator import Checkpoint, Checkpoints
from pulsar_state.core.bootstrap import find_start, prepare_topics, tail
from pulsar_state.core.callback_thread import CallbackFuture, CallbackThread
from pulsar_state.core.checkpoint_trigger import CheckpointTrigger
from pulsar_state.core.log.tailer import AppliedWrite, Tailer
from pulsar_state.core.op_codec import OpCodec
from pulsar_state.core.reply_future import ReplyFuture
from pulsar_state.core.snapshot import SnapshotPolicy, Snapshotter
from pulsar_state.core.write.writer import Writer
from pulsar_state.errors import (
    ConfigurationError,
    OperationTimeoutError,
    PulsarStateError,
    StateClosedError,
)
from pulsar_state.position import Position
from pulsar_state.topic_names import full_topic_name

if TYPE_CHECKING:
    from pulsar_state.core.builder import SharedStateManagerBuilder

__all__ = ["SharedStateManager"]

log = logging.getLogger(__name__)

S = TypeVar("S")
Op = TypeVar("Op")
R = TypeVar("R")


class SharedStateManager(Generic[S, Op]):
    """See the module docstring. Build one with :meth:`builder`."""

    @staticmethod
    def builder(
        client: pulsar.Client,
        topic: str,
        *,
        admin_url: str | None = None,
        admin: AdminEndpoint | None = None,
        admin_headers: dict[str, str] | None = None,
        admin_tls_trust_cert_path: str | None = None,
        admin_tls_allow_insecure: bool = False,
    ) -> SharedStateManagerBuilder[Any, Any]:
        """PIP-137's builder for a manager on ``topic``: ``builder(...).with_...().build()``.

        ``admin_url`` / ``admin``: the admin API, as for the manager itself.

        Returns:
            A new :class:`SharedStateManagerBuilder`; nothing is connected
            until :meth:`SharedStateManagerBuilder.build`.

        Raises:
            ConfigurationError: both ``admin_url`` and ``admin``, or a bad endpoint.
        """
        from pulsar_state.core.builder import SharedStateManagerBuilder  # noqa: PLC0415

        return SharedStateManagerBuilder(
            client,
            topic,
            admin=resolve_admin(
                admin_url,
                admin,
                legacy={
                    "admin_headers": admin_headers,
                    "admin_tls_trust_cert_path": admin_tls_trust_cert_path,
                    "admin_tls_allow_insecure": admin_tls_allow_insecure,
                },
            ),
        )

    def __init__(
        self,
        *,
        client: pulsar.Client,
        topic: str,
        codec: OpCodec[Op],
        initializer: Callable[[], S],
        applier: Callable[[S, Op], Any],
        config: StateConfig | None = None,
        admin_url: str | None = None,
        admin: AdminEndpoint | None = None,
        admin_headers: dict[str, str] | None = None,
        admin_tls_trust_cert_path: str | None = None,
        admin_tls_allow_insecure: bool = False,
        compactable: bool = False,
        snapshots: SnapshotPolicy[S] | None = None,
        checkpointer: Callable[[str, PulsarAdmin | None], Checkpoints[S]] | None = None,
    ) -> None:
        """``admin_url``: the admin API's URL, the shorthand of ``admin``, an
        :class:`~pulsar_state.cluster.endpoint.AdminEndpoint` that also holds its
        credentials (token, basic auth or TLS client certificate) and TLS trust
        (``ClusterAuth.admin_endpoint(url)`` builds one); give one of them.
        ``admin_headers``, ``admin_tls_trust_cert_path``, ``admin_tls_allow_insecure``:
        deprecated, set them on the endpoint.
        """
        endpoint = resolve_admin(
            admin_url,
            admin,
            legacy={
                "admin_headers": admin_headers,
                "admin_tls_trust_cert_path": admin_tls_trust_cert_path,
                "admin_tls_allow_insecure": admin_tls_allow_insecure,
            },
        )
        if not isinstance(client, pulsar.Client):
            raise TypeError(f"client must be a pulsar.Client, got {type(client).__name__}")
        if not callable(initializer) or not callable(applier):
            raise TypeError("initializer and applier must be callables")
        forks.claim_client(client)
        self._pid = os.getpid()
        self.config = config or StateConfig()
        self.topic = full_topic_name(topic)
        self._admin = (
            endpoint.admin(
                timeout_s=min(10.0, self.config.operation_timeout_s),
                retry_s=self.config.operation_timeout_s,
            )
            if endpoint is not None
            else None
        )
        if self.config.ensure_retention and self._admin is None:
            raise ConfigurationError(
                "admin_url is required to protect the state topic (infinite retention, no "
                "inactive deletion); pass admin_url=... (or admin=AdminEndpoint(...)) or "
                "StateConfig(ensure_retention=False) "
                "if the namespace is already configured so"
            )
        #: this incarnation of the topic (see PulsarAdmin.incarnation), when known
        self.incarnation: str | None = None
        if self._admin is not None:
            self.incarnation = prepare_topics(
                self._admin,
                self.topic,
                self.config,
                compactable=compactable,
                snapshots=snapshots is not None,
            )
        short = self.topic.rsplit("/", 1)[-1]
        self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix=f"pss-read-{short}")
        self._callbacks = CallbackThread(f"pss-callbacks-{short}")
        #: latest reads' replies: the broker's answer handed over from the
        #: client's IO thread (a queue put), the reader run here
        self._replies = CallbackThread(f"pss-reply-{short}")
        #: users' listeners -> the wrappers that hand them to the callback thread
        self._listeners: dict[Callable[[AppliedWrite[Op]], None], Any] = {}
        self._snapshotter = (
            Snapshotter(client, self.topic, snapshots, self.config.max_write_bytes)
            if snapshots is not None
            else None
        )
        started = time.monotonic()
        if self._snapshotter is not None:
            self._snapshotter.incarnation = self.incarnation
        try:
            self._checkpointer = (
                checkpointer(self.topic, self._admin) if checkpointer is not None else None
            )
            if self._checkpointer is not None:
                self._checkpointer.incarnation = self.incarnation
            start = find_start(initializer, self._snapshotter, self._checkpointer)
        except BaseException:
            self._executor.shutdown()
            raise
        #: where bootstrap started: "checkpoint", "snapshot" or "topic" (from the start)
        self.bootstrap_source = start.source
        try:
            self._tailer: Tailer[S, Op] = tail(
                client=client,
                topic=self.topic,
                codec=codec,
                applier=applier,
                config=self.config,
                start=start,
                start_over=lambda: find_start(initializer, self._snapshotter, None),
            )
        except BaseException:
            self._executor.shutdown()
            raise
        self.bootstrap_s = time.monotonic() - started
        metrics.BOOTSTRAP_SECONDS.labels(self.topic).set(self.bootstrap_s)
        self._trigger = (
            CheckpointTrigger(self._checkpointer, self._tailer)
            if self._checkpointer is not None
            else None
        )
        self._writer: Writer[S, Op] = Writer(
            client=client,
            topic=self.topic,
            tailer=self._tailer,
            codec=codec,
            config=self.config,
            callbacks=self._callbacks,
            compactable=compactable,
            snapshotter=self._snapshotter,
            snapshot_every=snapshots.every_writes if snapshots is not None else 0,
            after_publish=self._trigger.after_publish if self._trigger is not None else None,
            waiting_writers=(
                functools.partial(self._admin.waiting_producers, self.topic)
                if self._admin is not None
                else None
            ),
        )
        self._closed = False

    # -- reads ----------------------------------------------------------------

    def read(
        self,
        reader: Callable[[S], R],
        latest: bool = False,
        *,
        at_least: Position | str | None = None,
        timeout_s: float | None = None,
    ) -> Future[R]:
        """Run ``reader(state)``; with ``latest`` after catching up with the topic.

        ``latest=True`` reflects every write acknowledged before the call began.
        ``at_least`` (a token from :meth:`write`) waits only until that write is
        applied locally. Both wait at most ``timeout_s``.

        Returns:
            A future of what ``reader`` returned (run under the state lock).

        Raises:
            ForkedProcessError: at the call, in a process forked after the
                manager was made.
            ValueError, TypeError: at the call, for an ``at_least`` that is no
                position token.
            Exception: through the future, whatever ``reader`` raises, unchanged.
            StateClosedError: through the future, once the manager is closed;
                after its reader failed, the error that stopped it instead (e.g.
                InvalidMessageError with ``on_invalid_message="fail"``,
                PermissionDeniedError).
            OperationTimeoutError: through the future, when ``latest`` or
                ``at_least`` is not reached within ``timeout_s`` (default: the
                operation timeout).
        """
        self.check_process()
        timeout = timeout_s if timeout_s is not None else self.config.operation_timeout_s
        target = Position.parse(at_least) if at_least is not None else None
        if latest and target is None:
            return self._read_latest(reader, timeout)
        fut: CallbackFuture[R] = CallbackFuture(self._callbacks)
        if not latest and (target is None or self._tailer.applied.covers(target)):
            try:
                self._tailer.check_usable()
            except BaseException as exc:
                futures.set_exception(fut, exc)
            else:
                self._complete_with_read(reader, fut)
            return fut
        read = futures.submit(self._executor, self._read_after, reader, latest, target, timeout)
        futures.chain(read, fut)
        return fut

    def _read_latest(self, reader: Callable[[S], R], timeout: float) -> Future[R]:
        """Ask the broker for the last position; read once local state covers it.

        The first one to look at the future asks (:mod:`~pulsar_state.core.reply_future`):
        a caller waiting in ``result()`` (no timeout) with the client's blocking
        call, reading on its own thread; anything else with a callback, whose
        answer the IO thread only hands to the reply thread (no lock of ours is
        taken there). A lagging read is completed by the tailer's apply."""
        try:
            self._tailer.check_usable()
        except PulsarStateError as exc:
            closed: CallbackFuture[R] = CallbackFuture(self._callbacks)
            futures.set_exception(closed, exc)
            return closed

        def ask() -> None:  # not a waiting caller; in a fork, not with the parent's consumer
            self.check_process()
            if not self._tailer.asks_async:  # an older client: the reply thread blocks
                on_last_handed(self._replies.offer(ask_here))
                return
            try:
                self._tailer.ask_last_position(on_last, timeout)
            except PulsarStateError as exc:
                futures.set_exception(result, exc)

        def ask_here() -> None:  # a waiting caller, or the reply thread: ask and read here
            try:
                self.check_process()
                last = self._tailer.last_position(timeout)
            except PulsarStateError as exc:
                answer(None, exc)
            except BaseException as exc:  # nothing is left pending, on either thread
                futures.set_exception(result, exc)
            else:
                answer(last, None)

        def on_last(last: Position | None, error: PulsarStateError | None) -> None:
            try:  # the client's thread: hand over, nothing may escape it
                on_last_handed(self._replies.offer(answer, last, error))
            except BaseException as exc:  # no thread at interpreter shutdown
                futures.set_exception(result, exc)

        def on_last_handed(handed: bool) -> None:
            if not handed:  # closed meanwhile: fail it, not here (done-callbacks would run here)
                threading.Thread(
                    target=futures.set_exception, args=(result, StateClosedError()), daemon=True
                ).start()

        def answer(last: Position | None, error: PulsarStateError | None) -> None:
            try:
                reply(last, error)
            except BaseException as exc:
                futures.set_exception(result, exc)

        def reply(last: Position | None, error: PulsarStateError | None) -> None:
            if last is None:
                futures.set_exception(result, error or PulsarStateError("no last message id"))
                return
            if self._tailer.applied.covers(last):  # caught up: read at once
                self._complete_with_read(reader, result)
                return
            futures.chain(
                self._tailer.when_applied(last), result, lambda _: self._read_state(reader)
            )
            # lagging: bound the wait by the timeout (nothing to bound if read already)
            futures.fail_after(
                result,
                timeout,
                lambda: OperationTimeoutError(
                    f"local state did not reach {last} within {timeout:.1f}s"
                ),
            )

        result: ReplyFuture[R] = ReplyFuture(self._callbacks, ask=ask, ask_here=ask_here)
        return result

    def _read_after(
        self, reader: Callable[[S], R], latest: bool, target: Position | None, timeout: float
    ) -> R:
        if latest:
            self._tailer.catch_up(timeout)
        if target is not None:
            self._tailer.wait_applied(target, timeout)
        return self._read_state(reader)

    # -- writes ---------------------------------------------------------------

    def write(
        self,
        generator: Callable[[S], Iterable[Op] | None],
        reader: Callable[[S], R] | None = None,
        *,
        blind: bool = False,
    ) -> Future[Any]:
        """Publish the ops ``generator(latest_state)`` returns, as one atomic write.

        The generator may run more than once (after fencing, the writer catches
        up and runs it again); it must not have side effects. The future gives
        the write's position token, or ``reader(state)`` right after the write
        when a reader is given. ``blind=True`` promises the generator ignores
        the state, which lets such writes share one entry (group commit).

        Returns:
            A future of the write's :class:`Position` (the applied position
            when the generator returned no ops), or of ``reader(state)`` right
            after the write when a reader is given.

        Raises:
            ForkedProcessError: at the call, in a process forked after the
                manager was made.
            StateClosedError: at the call once the manager is closed; through
                the future when it closes before the write lands.
            Exception: through the future, whatever ``generator`` or ``reader``
                raises, unchanged (nothing is written if the generator raised),
                and what the codec raises encoding an op.
            TooManyOpsError, ValueTooLargeError: through the future, for a
                write over ``max_ops_per_write`` or ``max_write_bytes`` (nothing
                is written).
            WriteFailedError: through the future, when the write could not be
                published within its retry budget (``StateConfig.retry``).
            FencedError: through the future, when another writer took the
                topic over on every attempt.
            PermissionDeniedError: through the future, when the broker refuses
                this client's role.
        """
        self.check_process()
        written = self._writer.submit(generator, blind=blind)
        if reader is None:
            return written
        return futures.then(written, lambda _position: self._read_state(reader))

    def write_ops(self, ops: Sequence[Op]) -> Future[Position]:
        """Publish ``ops``, decided without the state, as one atomic write:
        :meth:`write` with a blind generator returning them, minus the
        generator (the commonest write, a map's put, carries its op as is).

        Returns:
            A future of the write's :class:`Position`.

        Raises:
            ForkedProcessError, StateClosedError: at the call, as :meth:`write`.
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError: through the future, as
                :meth:`write`; and what the codec raises encoding an op.
        """
        self.check_process()
        return self._writer.submit(None, blind=True, ops=ops)

    def _read_state(self, reader: Callable[[S], R]) -> R:
        """``reader(state)``, run under the state lock."""
        with self._tailer.lock:
            return reader(self._tailer.state)

    def _complete_with_read(self, reader: Callable[[S], R], result: Future[R]) -> None:
        """Complete ``result`` with ``reader(state)``, or with what it raised."""
        futures.run_into(result, lambda: self._read_state(reader))

    # -- checkpoints ----------------------------------------------------------

    def checkpoint(self) -> Future[Checkpoint]:
        """Write a checkpoint of the state now (see :mod:`pulsar_state.map.checkpoint`).

        Local state first catches up with the topic (every write acknowledged
        before the call, to any process, is in it); then the state is taken
        under the state lock, and serializing and publishing run on a thread of
        their own. While an automatic one is being written, a new one is taken
        as soon as it ends: the checkpoint returned always covers every write
        acknowledged before the call.

        Returns:
            A future of the checkpoint's :class:`~pulsar_state.map.checkpoint.format.Manifest`.

        Raises:
            ConfigurationError: at the call, if this manager keeps no checkpoints.
            ForkedProcessError: at the call, in a process forked after the
                manager was made.
            PulsarStateError: through the future, when a chunk or the manifest
                could not be published (the map is unaffected).
        """
        self.check_process()
        if self._trigger is None:
            raise ConfigurationError(f"the state of {self.topic} keeps no checkpoints")
        result: CallbackFuture[Checkpoint] = CallbackFuture(self._callbacks)
        timeout = self.config.operation_timeout_s
        caught_up = futures.submit(self._executor, self._tailer.catch_up, timeout)

        def take(done: Future[Position]) -> None:
            done.result()  # its error fails ``result``
            assert self._trigger is not None
            futures.chain(self._trigger.take(), result)

        futures.on_done(caught_up, result, take)
        return result

    @property
    def checkpointer(self) -> Checkpoints[S] | None:
        """This manager's checkpoint writer and reader (``None``: no checkpoints)."""
        return self._checkpointer

    # -- introspection --------------------------------------------------------

    @property
    def position(self) -> Position:
        """The position local state has applied through."""
        return self._tailer.applied

    @property
    def epoch(self) -> int | None:
        """This process's writer epoch (fencing token) while it holds the topic.

        Increases every time any writer gains the topic; attach it to external
        side effects and reject those carrying an older one.
        """
        return self._writer.epoch

    @property
    def latest_epoch(self) -> int:
        """The newest writer epoch local state has seen (from anyone)."""
        return self._tailer.epoch

    @property
    def invalid_messages(self) -> int:
        """Messages skipped as foreign, undecodable or failing to apply."""
        return self._tailer.invalid_count

    @property
    def messages_read(self) -> int:
        """Messages the tailer has read since start (bootstrap cost, in messages)."""
        return self._tailer.received

    @property
    def admin(self) -> PulsarAdmin | None:
        """The admin client made from ``admin_url`` (``None`` without one)."""
        return self._admin

    def add_listener(
        self, listener: Callable[[AppliedWrite[Op]], None], *, inline: bool = False
    ) -> None:
        """Call ``listener`` after each applied write, in log order.

        It runs on the manager's callback thread (it may wait on this manager).
        ``inline=True`` is for recipes built on the manager: the listener runs
        under the state lock on the applying thread, right after the write is
        applied, and must only hand the write over (e.g. to a queue).
        """
        self.check_process()
        if inline:
            self._tailer.add_listener(listener, inline=True)
            return
        callbacks = self._callbacks

        def hand_over(change: AppliedWrite[Op]) -> None:
            callbacks.submit(listener, change)

        self._listeners[listener] = hand_over
        self._tailer.add_listener(hand_over)

    def remove_listener(self, listener: Callable[[AppliedWrite[Op]], None]) -> None:
        """Stop calling ``listener`` (added by :meth:`add_listener`).

        Raises:
            ValueError: if ``listener`` is not registered.
        """
        self._tailer.remove_listener(self._listeners.pop(listener, listener))

    # -- lifecycle ------------------------------------------------------------

    def check_process(self) -> None:
        """Raise :class:`~pulsar_state.ForkedProcessError` in a process forked after
        this manager was made: it works only in the process that made it."""
        if os.getpid() != self._pid:  # (the message is built only then: every call asks)
            forks.check_process(self._pid, f"the state manager of {self.topic}")

    def close(self) -> None:
        """Stop the writer and the reader and release the topic (idempotent).

        Writes still pending fail with StateClosedError, as do later calls.

        Raises:
            ForkedProcessError: in a process forked after the manager was made
                (a child must not close its parent's subscription).
        """
        if getattr(self, "_closed", True):
            return
        self.check_process()  # a forked child must not close its parent's subscription
        self._closed = True
        self._writer.close()
        if self._checkpointer is not None:
            self._checkpointer.close()
        self._tailer.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._replies.close(timeout_s=5.0)
        self._callbacks.close(timeout_s=5.0)
        if self._admin is not None:
            self._admin.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
