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
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, Self, TypeVar, cast

import pulsar

from pulsar_state import forks, futures, metrics
from pulsar_state.admin import PulsarAdmin
from pulsar_state.admin_endpoint import AdminEndpoint, resolve_admin
from pulsar_state.callback_thread import CallbackFuture, CallbackThread
from pulsar_state.config import StateConfig
from pulsar_state.core.accelerator import Checkpoint, Checkpoints, Loaded
from pulsar_state.core.write.writer import Writer
from pulsar_state.errors import (
    ConfigurationError,
    OperationTimeoutError,
    PulsarStateError,
    StateTopicError,
)
from pulsar_state.op_codec import OpCodec, SerializerCodec
from pulsar_state.position import Position
from pulsar_state.snapshot import SnapshotPolicy, Snapshotter
from pulsar_state.tailer import AppliedWrite, Tailer
from pulsar_state.topic_names import full_topic_name, snapshot_topic

__all__ = ["SharedStateManager", "SharedStateManagerBuilder"]

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
        :class:`~pulsar_state.admin_endpoint.AdminEndpoint` that also holds its
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
            self._admin.ensure_topic(self.topic)
            if self.config.ensure_retention:
                self._admin.protect(
                    self.topic,
                    compaction_threshold_bytes=(
                        self.config.compaction_threshold_bytes if compactable else None
                    ),
                )
            if snapshots is not None:
                self._admin.ensure_topic(snapshot_topic(self.topic))
                if self.config.ensure_retention:
                    self._admin.protect(
                        snapshot_topic(self.topic), compaction_threshold_bytes=1024 * 1024
                    )
            # snapshots and checkpoints are bound to this incarnation of the topic
            self.incarnation = self._admin.incarnation(self.topic)
            try:
                self._admin.reap_subscriptions(self.topic, self.config.subscription_prefix)
            except PulsarStateError:
                log.debug("could not reap stale subscriptions on %s", self.topic, exc_info=True)
        short = self.topic.rsplit("/", 1)[-1]
        self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix=f"pss-read-{short}")
        self._callbacks = CallbackThread(f"pss-callbacks-{short}")
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
        snapshot = self._snapshotter.load() if self._snapshotter is not None else None
        try:
            self._checkpointer = (
                checkpointer(self.topic, self._admin) if checkpointer is not None else None
            )
        except BaseException:
            self._executor.shutdown()
            raise
        loaded: Loaded[S] | None = None
        if self._checkpointer is not None:
            self._checkpointer.incarnation = self.incarnation
        if snapshot is None and self._checkpointer is not None:
            loaded = self._checkpointer.load()
        #: where bootstrap started: "checkpoint", "snapshot" or "topic" (from the start)
        self.bootstrap_source = (
            "checkpoint" if loaded is not None else "snapshot" if snapshot is not None else "topic"
        )
        start: Position | None = None
        start_epoch = 0
        state: S
        if loaded is not None:
            state = loaded.state
            start, start_epoch = loaded.position, loaded.epoch
        elif snapshot is not None:
            state, start, start_epoch = snapshot.state, snapshot.position, snapshot.epoch
        else:
            state = initializer()
        try:
            self._tailer: Tailer[S, Op] = Tailer(
                client=client,
                topic=self.topic,
                codec=codec,
                applier=applier,
                state=state,
                config=self.config,
                start=start,
                start_epoch=start_epoch,
                # after a checkpoint, the raw tail: a compacted one hides deletes
                read_compacted=False if loaded is not None else None,
            )
        except pulsar.PulsarException as exc:
            self._executor.shutdown()
            raise StateTopicError(f"cannot read {self.topic}: {exc}") from exc
        if loaded is not None:
            self._tailer.stale_keys.update(loaded.stale_keys)
        self._tailer.start()
        try:
            self._tailer.catch_up(self.config.operation_timeout_s * 4)
        except BaseException:
            self._tailer.close()
            self._executor.shutdown()
            raise
        self.bootstrap_s = time.monotonic() - started
        metrics.BOOTSTRAP_SECONDS.labels(self.topic).set(self.bootstrap_s)
        if self._checkpointer is not None:  # its count of applied ops starts here
            self._checkpointer.counting_from(self._tailer.applied)
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
            after_publish=self._maybe_checkpoint if self._checkpointer is not None else None,
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
        fut: CallbackFuture[R] = CallbackFuture(self._callbacks)
        if not latest and (target is None or self._tailer.applied.covers(target)):
            try:
                self._tailer.check_usable()
            except BaseException as exc:
                futures.set_exception(fut, exc)
            else:
                self._complete_with_read(reader, fut)
            return fut
        if latest and target is None:
            return self._read_latest(reader, timeout, fut)
        futures.chain(self._executor.submit(self._read_after, reader, latest, target, timeout), fut)
        return fut

    def _read_latest(
        self, reader: Callable[[S], R], timeout: float, result: CallbackFuture[R]
    ) -> Future[R]:
        """Ask the broker for the last position; read once local state covers it.

        No thread of ours blocks: the broker's answer (on the client's IO
        thread, which only hands it to a read thread: no lock of ours is taken
        there) and the tailer's apply complete the future (the common,
        caught-up case costs one round trip).
        """

        def on_last(last: Position | None, error: PulsarStateError | None) -> None:
            # runs on the client's thread: hand over, nothing may escape it
            try:
                self._executor.submit(answer, last, error)
            except BaseException as exc:  # closed meanwhile, or no thread at shutdown
                futures.set_exception(result, exc)

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

        try:
            self._tailer.ask_last_position(on_last, timeout)
        except PulsarStateError as exc:
            futures.set_exception(result, exc)
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

    def _read_state(self, reader: Callable[[S], R]) -> R:
        """``reader(state)``, run under the state lock."""
        with self._tailer.lock:
            return reader(self._tailer.state)

    def _complete_with_read(self, reader: Callable[[S], R], result: Future[R]) -> None:
        """Complete ``result`` with ``reader(state)``, or with what it raised."""
        futures.run_into(result, lambda: self._read_state(reader))

    # -- checkpoints ----------------------------------------------------------

    def checkpoint(self) -> Future[Checkpoint]:
        """Write a checkpoint of the state now (see :mod:`pulsar_state.checkpoint`).

        Local state first catches up with the topic (every write acknowledged
        before the call, to any process, is in it); then the state is taken
        under the state lock, and serializing and publishing run on a thread of
        their own. While an automatic one is being written, a new one is taken
        as soon as it ends: the checkpoint returned always covers every write
        acknowledged before the call.

        Returns:
            A future of the checkpoint's :class:`~pulsar_state.checkpoint_format.Manifest`.

        Raises:
            ConfigurationError: at the call, if this manager keeps no checkpoints.
            ForkedProcessError: at the call, in a process forked after the
                manager was made.
            PulsarStateError: through the future, when a chunk or the manifest
                could not be published (the map is unaffected).
        """
        self.check_process()
        if self._checkpointer is None:
            raise ConfigurationError(f"the state of {self.topic} keeps no checkpoints")
        result: CallbackFuture[Checkpoint] = CallbackFuture(self._callbacks)
        caught_up = self._executor.submit(self._tailer.catch_up, self.config.operation_timeout_s)

        def take(done: Future[Position]) -> None:
            done.result()  # its error fails ``result``
            futures.chain(self._checkpoint_caught_up(), result)

        futures.on_done(caught_up, result, take)
        return result

    def _checkpoint_caught_up(self) -> Future[Checkpoint]:
        checkpointer = self._checkpointer
        assert checkpointer is not None
        with self._tailer.lock:
            running = checkpointer.running
            if running is None:
                # not automatic: always written, so its future gives a Manifest
                return cast("Future[Checkpoint]", self._take_checkpoint_locked(checkpointer))
        result: Future[Checkpoint] = Future()

        def after_running(_done: Future[Any]) -> None:
            # the running one may predate this call: take a fresh one
            try:
                futures.chain(self._checkpoint_caught_up(), result)
            except BaseException as exc:  # e.g. closed meanwhile
                futures.set_exception(result, exc)

        running.add_done_callback(after_running)
        return result

    def _take_checkpoint_locked(
        self, checkpointer: Checkpoints[S], *, automatic: bool = False
    ) -> Future[Any]:
        """Start a checkpoint of the state as applied now (under the state lock);
        an ``automatic`` one is not written if another holder's is newer."""
        tailer = self._tailer
        return checkpointer.take(
            tailer.state,
            tailer.applied,
            tailer.epoch,
            tailer.stale_keys,
            tailer.applied_ops,
            automatic=automatic,
        )

    def _checkpoint_due(self) -> bool:
        """Whether a checkpoint is due (unlocked, any thread: ints, a racy read
        is harmless)."""
        checkpointer = self._checkpointer
        tailer = self._tailer
        return checkpointer is not None and checkpointer.due(
            tailer.applied_ops,
            tailer.state,
        )

    def _maybe_checkpoint(self) -> None:
        """After each publish (writer thread): a checkpoint when one is due."""
        checkpointer = self._checkpointer
        if checkpointer is None:
            return
        tailer = self._tailer
        if not self._checkpoint_due():  # most publishes stop here
            return
        with tailer.lock:
            if checkpointer.due(tailer.applied_ops, tailer.state):
                self._take_checkpoint_locked(checkpointer, automatic=True)

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
        self._callbacks.close(timeout_s=5.0)
        if self._admin is not None:
            self._admin.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SharedStateManagerBuilder(Generic[S, Op]):
    """PIP-137's builder: ``builder(...).with_...().build()``."""

    def __init__(
        self,
        client: pulsar.Client,
        topic: str,
        *,
        admin: AdminEndpoint | None,
    ) -> None:
        self._client = client
        self._topic = topic
        self._admin_endpoint = admin
        self._serializer: Callable[[Op], bytes] | None = None
        self._deserializer: Callable[[bytes], Op] | None = None
        self._codec: OpCodec[Op] | None = None
        self._initializer: Callable[[], S] | None = None
        self._applier: Callable[[S, Op], Any] | None = None
        self._config = StateConfig()
        self._compactable = False
        self._snapshots: SnapshotPolicy[S] | None = None

    def with_op_serializer(self, serializer: Callable[[Op], bytes]) -> Self:
        """Encode each op with ``serializer`` (with :meth:`with_op_deserializer`).

        Returns:
            This builder.
        """
        self._serializer = serializer
        return self

    def with_op_deserializer(self, deserializer: Callable[[bytes], Op]) -> Self:
        """Decode each op with ``deserializer`` (it raises ``ValueError`` on bad input).

        Returns:
            This builder.
        """
        self._deserializer = deserializer
        return self

    def with_op_codec(self, codec: OpCodec[Op], *, compactable: bool = False) -> Self:
        """Keyed ops. ``compactable``: last value per key wins, empty = delete."""
        self._codec = codec
        self._compactable = compactable
        return self

    def with_snapshots(
        self,
        serialize: Callable[[S], bytes],
        deserialize: Callable[[bytes], S],
        *,
        every_writes: int = 1000,
    ) -> Self:
        """Snapshot the state every ``every_writes`` writes (see :mod:`pulsar_state.snapshot`)."""
        self._snapshots = SnapshotPolicy(
            serialize=serialize, deserialize=deserialize, every_writes=every_writes
        )
        return self

    def with_database_initializer(self, initializer: Callable[[], S]) -> Self:
        """Make the empty state with ``initializer()`` (before the topic is read).

        Returns:
            This builder.
        """
        self._initializer = initializer
        return self

    def with_change_log_applier(self, applier: Callable[[S, Op], Any]) -> Self:
        """Apply each op to the state with ``applier(state, op)``, in topic order.

        Returns:
            This builder.
        """
        self._applier = applier
        return self

    def with_config(self, config: StateConfig | None = None, **overrides: Any) -> Self:
        """A :class:`StateConfig`, or keyword overrides of the current one."""
        base = config or self._config
        self._config = StateConfig(**{**base.__dict__, **overrides}) if overrides else base
        return self

    def build(self) -> SharedStateManager[S, Op]:
        """Make the manager: protect the topic, read it up to now, then return.

        Returns:
            A running :class:`SharedStateManager`, caught up with the topic.

        Raises:
            ConfigurationError: if the codec (serializer and deserializer) or
                the initializer and applier are missing, or ``admin_url`` is
                missing while ``ensure_retention`` is on.
            TypeError: for a client that is no ``pulsar.Client``.
            ForkedProcessError: for a client already used in another process
                (e.g. the parent of this forked one).
            StateTopicError: if the topic cannot be read or protected (its
                subclasses say why: TopicNotFoundError, PermissionDeniedError,
                AdminUnreachableError, InvalidTopicNameError).
            OperationTimeoutError: if the first catch-up takes longer than four
                operation timeouts.
        """
        codec = self._codec
        if codec is None:
            if self._serializer is None or self._deserializer is None:
                raise ConfigurationError(
                    "set with_op_serializer and with_op_deserializer (or with_op_codec)"
                )
            codec = SerializerCodec(self._serializer, self._deserializer)
        if self._initializer is None or self._applier is None:
            raise ConfigurationError(
                "set with_database_initializer and with_change_log_applier before build()"
            )
        return SharedStateManager(
            client=self._client,
            topic=self._topic,
            codec=codec,
            initializer=self._initializer,
            applier=self._applier,
            config=self._config,
            admin=self._admin_endpoint,
            compactable=self._compactable,
            snapshots=self._snapshots,
        )
