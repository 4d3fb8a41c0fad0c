"""MetadataStore: PIP-45's metadata store on one Pulsar topic, through the state core.

The tree (:mod:`pulsar_state.metadata.tree`) is the replicated state; each
put or delete is a write whose generator checks the expected version against
the latest tree, so compare-and-set is exact under any contention. The topic is
keyed by path and compactable (a record per live path), like a ``PulsarMap``.

Ephemeral nodes and sessions. Each store is a session. It proves it is alive
the way Pulsar itself knows a client is: a consumer connected on the session's
own subscription of ``<topic>-pss-sessions``. Every store checks, every
``session_check_interval_s``, the owners of ephemeral nodes against the
broker's list of connected consumers; an owner that has had none for
``session_timeout_s`` is dead and its ephemeral nodes are deleted (each write
deletes those still there, so any number of checkers may race to make it; a
session with more nodes than one write can carry loses them over several
writes, each as large as ``max_ops_per_write`` and ``max_write_bytes`` allow:
the session is dead, so nothing can make them again in between).

Bound: a process that dies or closes its connection (``kill -9`` included: the
kernel closes its sockets) loses its nodes within ``session_timeout_s +
session_check_interval_s`` plus one write. A process cut off from the network
without its socket closing is noticed by the broker's keep-alive first
(``keepAliveIntervalSeconds``, 30 s by default, so up to about a minute more).
Wall clocks are not involved beyond each checker's own monotonic timer.

A store watches its own session the same way, from its side: its session
consumer disconnected is ``CONNECTION_LOST``; still disconnected after
``session_timeout_s`` is ``SESSION_LOST`` (others may have deleted its
ephemeral nodes by then); connected again is ``RECONNECTED`` or
``SESSION_REESTABLISHED``. The client reconnects the consumer by itself, with
the same session id, so lock holders can revalidate their locks.

A lease, so that a holder gives up before anyone else can take over. A
connection cut off without its socket closing, or a process paused (a long
GC, SIGSTOP, a suspended VM), looks connected from its own side until the
client's keep-alive notices, which may be after the broker's did, and after
others expired the session. So the store also asks the broker a question on
its session consumer's connection (its last message id) every quarter of the
session timeout: the answer proves the broker saw the consumer connected after
the question was sent. The session is sure until ``session_timeout_s`` after
the last answered question was *sent*; others expire it only
``session_timeout_s`` after the broker dropped the consumer, which is later.
Past that, the store reports ``SESSION_LOST`` and every lock's ``held`` is
False at once (it reads the lease, it does not wait for a thread to notice).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from concurrent.futures import Future

import pulsar

from pulsar_state import forks
from pulsar_state.cluster.endpoint import AdminEndpoint, resolve_admin
from pulsar_state.config import DEFAULT_COMPACTION_THRESHOLD_BYTES, StateConfig
from pulsar_state.core import futures
from pulsar_state.core.log.format import MESSAGE_OVERHEAD_BYTES
from pulsar_state.core.log.tailer import AppliedWrite
from pulsar_state.core.manager import SharedStateManager
from pulsar_state.errors import (
    ConfigurationError,
    PulsarStateError,
    SessionLostError,
    StateClosedError,
)
from pulsar_state.metadata.base import BaseMetadataStore
from pulsar_state.metadata.tree import (
    GetResult,
    MetaCodec,
    MetadataTree,
    MetaOp,
    Notification,
    Record,
    SessionEvent,
    Stat,
    validate_path,
    validate_subtree,
)
from pulsar_state.topic_names import sessions_topic

__all__ = ["MetadataStore"]

log = logging.getLogger(__name__)

_SESSION_PREFIX = "session-"


_MetaCodec = MetaCodec  # its name before it moved to the tree (the CLI's readers use it)


class MetadataStore(BaseMetadataStore):
    """A PIP-45 metadata store backed by a Pulsar topic. See the module docstring."""

    def __init__(
        self,
        client: pulsar.Client,
        topic: str,
        *,
        admin_url: str | None = None,
        admin: AdminEndpoint | None = None,
        admin_headers: dict[str, str] | None = None,
        admin_tls_trust_cert_path: str | None = None,
        admin_tls_allow_insecure: bool = False,
        config: StateConfig | None = None,
        session_timeout_s: float = 10.0,
        session_check_interval_s: float = 1.0,
    ) -> None:
        """``admin_url`` (a URL) or ``admin`` (an
        :class:`~pulsar_state.cluster.endpoint.AdminEndpoint` with credentials and TLS
        trust): the admin API, required. ``admin_headers``,
        ``admin_tls_trust_cert_path`` and ``admin_tls_allow_insecure`` are
        deprecated: set them on the endpoint."""
        endpoint = resolve_admin(
            admin_url,
            admin,
            legacy={
                "admin_headers": admin_headers,
                "admin_tls_trust_cert_path": admin_tls_trust_cert_path,
                "admin_tls_allow_insecure": admin_tls_allow_insecure,
            },
        )
        if endpoint is None:
            raise ConfigurationError(
                "admin_url (or admin) is required (topic protection, session checks)"
            )
        if session_timeout_s <= 0 or session_check_interval_s <= 0:
            raise ConfigurationError("session timeouts must be > 0")
        super().__init__(session_id=uuid.uuid4().hex)
        self.session_timeout_s = session_timeout_s
        self.session_check_interval_s = session_check_interval_s
        self._pending: list[Notification] = []
        self._tokens = itertools.count(1)
        self._closed = False
        self.manager: SharedStateManager[MetadataTree, MetaOp] = SharedStateManager(
            client=client,
            topic=topic,
            codec=MetaCodec(),
            initializer=MetadataTree,
            applier=self._apply,
            config=(config or StateConfig()).with_default_compaction(
                DEFAULT_COMPACTION_THRESHOLD_BYTES
            ),
            admin=endpoint,
            compactable=True,
        )
        self._pending.clear()  # bootstrap's changes are history, not news
        self.manager.add_listener(self._on_write, inline=True)
        self.sessions_topic = sessions_topic(self.manager.topic)
        admin_client = self.manager.admin
        assert admin_client is not None
        self._client = client
        try:
            admin_client.ensure_topic(self.sessions_topic)
            admin_client.protect(self.sessions_topic)
            #: monotonic time until which the session is sure (see the module docstring)
            self._lease_until = time.monotonic() + session_timeout_s
            self._subscribe_session()
        except (PulsarStateError, pulsar.PulsarException):
            self.manager.close()
            self._stop_dispatcher()
            raise
        self._dead_since: dict[str, float] = {}
        self._own_down_since: float | None = None  # our session consumer disconnected
        self._own_lost = False  # ...for the whole session timeout
        #: the own-session watcher and the lease renewer, one at a time
        self._own_lock = threading.Lock()
        self._stop = threading.Event()
        self._checker = threading.Thread(
            target=self._check_sessions, name=f"pss-sessions-{self.session_id[:8]}", daemon=True
        )
        self._checker.start()
        # our own session on a thread of its own: the checker above makes admin
        # calls that may be retried for tens of seconds while the broker is
        # away, and a lock holder must hear SESSION_LOST in time regardless
        self._own_watcher = threading.Thread(
            target=self._watch_own_session_loop,
            name=f"pss-own-session-{self.session_id[:8]}",
            daemon=True,
        )
        self._own_watcher.start()
        self._lease_renewer = threading.Thread(
            target=self._renew_lease_loop,
            name=f"pss-session-lease-{self.session_id[:8]}",
            daemon=True,
        )
        self._lease_renewer.start()

    @property
    def session_sure(self) -> bool:
        """Whether the session's lease runs (the broker answered on the session's
        connection less than ``session_timeout_s`` ago) and it is not lost."""
        return (
            time.monotonic() < self._lease_until
            and self.session_state is not SessionEvent.SESSION_LOST
        )

    def _subscribe_session(self) -> None:
        """(Re)open this session's consumer: the broker's proof that we are alive."""
        self._session = forks.keep_in_children(
            self._client.subscribe(
                self.sessions_topic,
                f"{_SESSION_PREFIX}{self.session_id}",
                consumer_type=pulsar.ConsumerType.Exclusive,
                receiver_queue_size=1,
                properties={"pulsar-state-role": "session"},
            )
        )

    # -- applying (tailer thread) -----------------------------------------------

    def _apply(self, tree: MetadataTree, op: MetaOp) -> None:
        self._pending.extend(tree.apply(op))

    def _on_write(self, change: AppliedWrite[MetaOp]) -> None:
        notes, self._pending = self._pending, []
        self._notify(notes)

    # -- reads --------------------------------------------------------------------

    def get(self, path: str, latest: bool = False) -> Future[GetResult | None]:
        validate_path(path)
        return self.manager.read(lambda t: t.get(path), latest)

    def get_children(self, path: str, latest: bool = False) -> Future[list[str]]:
        validate_path(path)
        return self.manager.read(lambda t: t.children(path), latest)

    def exists(self, path: str, latest: bool = False) -> Future[bool]:
        validate_path(path)
        return self.manager.read(lambda t: path in t.nodes, latest)

    def fencing_token(self, path: str) -> int | None:
        record = self.manager.read(lambda t: t.nodes.get(path)).result()
        return None if record is None else record.token

    # -- writes -------------------------------------------------------------------

    def _token(self) -> int:
        return ((self.manager.epoch or 0) << 40) | next(self._tokens)

    def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Future[Stat]:
        if sequential:
            self._check_sequential(path, value, expected_version)
        else:
            self._check_put(path, value, expected_version)
        if ephemeral and self.session_state is SessionEvent.SESSION_LOST:
            try:
                self._check_session_for(ephemeral)
            except SessionLostError as exc:  # others would delete it at once
                return futures.failed(exc)
        if sequential:
            return self._put_sequential(path, bytes(value), ephemeral)
        data = bytes(value)
        planned: list[Record] = []  # one per run of the generator
        owner = self.session_id if ephemeral else None

        def gen(tree: MetadataTree) -> list[MetaOp]:
            op = tree.plan_put(
                path,
                data,
                expected_version,
                int(time.time() * 1000),
                owner=owner,
                token=self._token(),
            )
            assert op.record is not None
            planned.append(op.record)
            return [op]

        def stat(tree: MetadataTree) -> Stat:
            # The generator may run more than once and a retried publish lands
            # once: the first landing applies, later copies are skipped as
            # duplicates. So report the run that is in the tree, not the last one
            # (its token is the lock holder's identity).
            current = tree.nodes.get(path)
            if current is not None and any(current == r for r in planned):
                return current.stat(path)
            return planned[-1].stat(path)  # changed again since: nothing better to say

        return self.manager.write(gen, stat)

    def _put_sequential(self, prefix: str, data: bytes, ephemeral: bool) -> Future[Stat]:
        planned: list[MetaOp] = []  # the node of each run of the generator
        owner = self.session_id if ephemeral else None

        def gen(tree: MetadataTree) -> list[MetaOp]:
            # counter and node in one write, planned on the latest tree
            ops = tree.plan_sequential(
                prefix, data, int(time.time() * 1000), owner=owner, token=self._token()
            )
            planned.append(ops[-1])
            return ops

        def stat(tree: MetadataTree) -> Stat:
            for op in planned:  # the run that landed (see put)
                assert op.record is not None
                if tree.nodes.get(op.path) == op.record:
                    return op.record.stat(op.path)
            last = planned[-1]
            assert last.record is not None
            return last.record.stat(last.path)

        return self.manager.write(gen, stat)

    def delete_recursive(self, path: str) -> Future[list[str]]:
        validate_subtree(path)
        deleted: list[list[str]] = []

        def gen(tree: MetadataTree) -> list[MetaOp]:
            ops = tree.plan_delete_recursive(path)
            deleted.append([op.path for op in ops])
            return ops

        def refused(exc: BaseException) -> list[str]:
            if not deleted:  # the generator never ran: not about its size
                raise exc
            self._explain_delete_recursive(path, len(deleted[-1]), exc)

        return futures.then(
            self.manager.write(gen, lambda _tree: deleted[-1]), lambda paths: paths, recover=refused
        )

    def delete(
        self,
        path: str,
        expected_version: int | None = None,
        *,
        expected_owner: str | None = None,
        expected_token: int | None = None,
    ) -> Future[None]:
        validate_path(path)

        def gen(tree: MetadataTree) -> list[MetaOp]:
            # checked on the latest tree inside the write: exact under contention
            op = tree.plan_delete(
                path,
                expected_version,
                expected_owner=expected_owner,
                expected_token=expected_token,
            )
            return [op]

        return self.manager.write(gen, lambda _tree: None)

    # -- sessions -------------------------------------------------------------------

    def _check_sessions(self) -> None:
        admin = self.manager.admin
        assert admin is not None
        while not self._stop.wait(self.session_check_interval_s):
            try:
                owners = self.manager.read(lambda t: t.owners()).result() - {self.session_id}
                if not owners:
                    self._dead_since.clear()
                    continue
                subs = admin.stats(self.sessions_topic).get("subscriptions", {})
                alive = {
                    name[len(_SESSION_PREFIX) :]
                    for name, sub in subs.items()
                    if name.startswith(_SESSION_PREFIX) and sub.get("consumers")
                }
                now = time.monotonic()
                for owner in owners:
                    if owner in alive:
                        self._dead_since.pop(owner, None)
                        continue
                    since = self._dead_since.setdefault(owner, now)
                    if now - since >= self.session_timeout_s:
                        self._expire(owner)
                        self._dead_since.pop(owner, None)
            except StateClosedError:
                return
            except Exception:
                if not self._stop.is_set():
                    log.warning("session check on %s failed", self.manager.topic, exc_info=True)

    def _watch_own_session_loop(self) -> None:
        """Look at our own session consumer often: no network call here, so a
        slow admin API never delays SESSION_LOST."""
        interval = min(self.session_check_interval_s, self.session_timeout_s / 4)
        while not self._stop.wait(interval):
            try:
                self._watch_own_session()
            except Exception:
                log.warning("own session check on %s failed", self.manager.topic, exc_info=True)

    def _lapse(self, now: float) -> None:
        """Under ``_own_lock``: the lease ran out: the session is lost (once)."""
        if self._own_down_since is None:
            self._own_down_since = now
            self._session_event(SessionEvent.CONNECTION_LOST)
        if not self._own_lost:
            self._own_lost = True
            self._session_event(SessionEvent.SESSION_LOST)

    def _watch_own_session(self) -> None:
        """Turn our session consumer's connection into session events."""
        with self._own_lock:
            self._watch_own_session_locked()

    def _watch_own_session_locked(self) -> None:
        try:
            connected = bool(self._session.is_connected())
        except Exception:
            connected = False
        now = time.monotonic()
        if now >= self._lease_until:  # no answer for the whole session timeout
            self._lapse(now)
            return
        if connected:
            if self._own_down_since is not None:
                back = (
                    SessionEvent.SESSION_REESTABLISHED
                    if self._own_lost
                    else SessionEvent.RECONNECTED
                )
                self._own_down_since, self._own_lost = None, False
                self._session_event(back)
            return
        if self._own_down_since is None:
            self._own_down_since = now
            self._session_event(SessionEvent.CONNECTION_LOST)
        elif not self._own_lost and now - self._own_down_since >= self.session_timeout_s:
            self._own_lost = True
            self._session_event(SessionEvent.SESSION_LOST)

    def _renew_lease_loop(self) -> None:
        """Ask the broker on the session's connection, a quarter of the session
        timeout apart; each answer renews the lease from when it was asked. A
        question left unanswered (the connection cut, the broker or this
        process paused) renews nothing, so the lease runs out."""
        interval = self.session_timeout_s / 4
        while not self._stop.wait(interval):
            asked = time.monotonic()
            try:
                self._session.get_last_message_id()
            except Exception:
                log.debug("session lease question on %s failed", self.manager.topic, exc_info=True)
                continue
            with self._own_lock:
                if asked >= self._lease_until:
                    # asked after the lease ran out (this process paused, say): the
                    # session may have been expired and made again meanwhile, so the
                    # loss is reported before the answer renews anything, and locks
                    # are revalidated when the session is seen back
                    self._lapse(time.monotonic())
                self._lease_until = max(self._lease_until, asked + self.session_timeout_s)

    def _expire(self, owner: str) -> None:
        """Delete every ephemeral node of a dead session."""
        self._delete_ephemeral(owner)
        log.info("expired session %s on %s", owner, self.manager.topic)
        admin = self.manager.admin
        if admin is not None:
            try:
                admin.request(
                    "DELETE",
                    f"/admin/v2/{self.sessions_topic.replace('://', '/')}"
                    f"/subscription/{_SESSION_PREFIX}{owner}",
                )
            except Exception:
                log.debug("could not remove the subscription of %s", owner, exc_info=True)

    # -- lifecycle --------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self.manager.check_process()  # not in a forked child: its session is the parent's
        self._stop.set()
        self._checker.join(timeout=5)
        self._own_watcher.join(timeout=5)
        self._lease_renewer.join(timeout=1)  # a question in flight ends with the client
        try:  # a clean exit takes its ephemeral nodes along at once
            self._expire_own()
        except Exception:
            log.warning(
                "could not delete the ephemeral nodes of %s", self.session_id, exc_info=True
            )
        self._closed = True
        try:
            self._session.unsubscribe()
        except pulsar.PulsarException:
            log.debug("session unsubscribe failed", exc_info=True)
        self.manager.close()
        self._stop_dispatcher()

    def _expire_own(self) -> None:
        self._delete_ephemeral(self.session_id)

    def _delete_ephemeral(self, owner: str) -> None:
        """Delete ``owner``'s ephemeral nodes: in one write when they fit, else
        in as many writes as they need, each as large as the limits allow.

        The owner's session is over (dead, or this store closing), so no node
        of it is made in between; each write's generator deletes the nodes
        still there, so checkers racing to expire it do no harm.
        """
        config = self.manager.config
        budget = config.max_write_bytes // 2  # room for the write's own messages

        def gen(tree: MetadataTree) -> list[MetaOp]:
            ops: list[MetaOp] = []
            size = 0
            for path in tree.ephemeral_of(owner):
                cost = len(path.encode()) + MESSAGE_OVERHEAD_BYTES
                if ops and (size + cost > budget or len(ops) >= config.max_ops_per_write):
                    break
                ops.append(tree.plan_delete(path, None))
                size += cost
            return ops

        left = self.manager.read(lambda tree: len(tree.ephemeral_of(owner))).result()
        # each write deletes at least one node; no more writes than nodes, plus one
        for _ in range(left + 1):
            self.manager.write(gen).result(timeout=config.operation_timeout_s)
            if not self.manager.read(lambda tree: bool(tree.ephemeral_of(owner))).result():
                return
        raise PulsarStateError(f"the ephemeral nodes of session {owner} keep coming back")
