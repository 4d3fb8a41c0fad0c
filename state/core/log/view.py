"""TopicView: read a state topic without changing anything on the cluster.

A :class:`~pulsar_state.core.manager.SharedStateManager` is made to write: opening
one creates the topic if missing, protects it (retention, inactive-topic
policy, compaction threshold), reaps stale subscriptions and subscribes with
a durable subscription. A reader needs none of that, and a role with only the
consume permission may not do most of it. A view:

* checks through the admin API (GETs only) that the topic exists, and raises
  :class:`~pulsar_state.errors.TopicNotFoundError` if not; it never opens a
  Reader on a missing topic, which the broker would create when auto topic
  creation is on (a topic deleted between that check and the Reader's open
  would still be re-created by such a broker: a window of one round trip);
* reads with a non-durable ``Reader`` (compacted view plus the raw tail) and
  the state core's own replay (:class:`~pulsar_state.core.log.replay.LogReplay`), so it
  sees what a manager sees: whole writes only, tombstones applied, stale
  (fenced) writes and duplicates dropped;
* has no producer and makes no admin write.

``catch_up()`` reads through the topic's last message as of the call;
``follow()`` then applies new messages as they come.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, Self, TypeVar

import pulsar

from pulsar_state import forks
from pulsar_state.cluster.endpoint import AdminEndpoint, resolve_admin
from pulsar_state.core.log.replay import AppliedWrite, LogReplay
from pulsar_state.core.op_codec import OpCodec
from pulsar_state.errors import (
    ConfigurationError,
    OperationTimeoutError,
    PermissionDeniedError,
    StateTopicError,
)
from pulsar_state.topic_names import full_topic_name

__all__ = ["TopicView"]

log = logging.getLogger(__name__)

S = TypeVar("S")
Op = TypeVar("Op")


class TopicView(Generic[S, Op]):
    """A read-only replica of a state topic. See the module docstring."""

    def __init__(
        self,
        *,
        client: pulsar.Client,
        topic: str,
        codec: OpCodec[Op],
        initializer: Callable[[], S],
        applier: Callable[[S, Op], Any],
        admin_url: str | None = None,
        admin: AdminEndpoint | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        """``admin``: the admin API that checks the topic exists, with its credentials
        and TLS trust (an :class:`~pulsar_state.cluster.endpoint.AdminEndpoint`), or
        ``admin_url``, a bare URL; one of them is required."""
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.topic = full_topic_name(topic)
        self.timeout_s = timeout_s
        endpoint = resolve_admin(admin_url, admin)
        if endpoint is None:
            raise ConfigurationError("a view needs admin_url or admin (an AdminEndpoint)")
        admin_client = endpoint.admin(timeout_s=min(10.0, timeout_s), retry_s=timeout_s)
        try:
            admin_client.require_topic(self.topic)
        finally:
            admin_client.close()
        self._replay: LogReplay[S, Op] = LogReplay(
            topic=self.topic, codec=codec, applier=applier, state=initializer()
        )
        try:
            self._reader = forks.keep_in_children(
                client.create_reader(self.topic, pulsar.MessageId.earliest, is_read_compacted=True)
            )
        except (pulsar.AuthorizationError, pulsar.AuthenticationError) as exc:
            raise PermissionDeniedError(
                f"not permitted to read {self.topic} ({exc}): grant the client's role the "
                "consume permission"
            ) from exc
        except pulsar.PulsarException as exc:
            raise StateTopicError(f"cannot read {self.topic}: {exc}") from exc

    @property
    def state(self) -> S:
        """The state as replayed so far (only this view's thread changes it)."""
        return self._replay.state

    def catch_up(self, *, on_progress: Callable[[int], object] | None = None) -> S:
        """Read through the topic's last message as of now; the state there.

        Bounded by ``timeout_s``: a topic that does not deliver its tail in
        time raises :class:`OperationTimeoutError`. ``on_progress(n)`` is told
        the messages read so far, every 1000 messages (a progress display).

        Returns:
            The replayed state (the view's own object; read it, do not keep
            changing it).

        Raises:
            OperationTimeoutError: if the tail is not read within ``timeout_s``.
            StateTopicError: if the client fails reading the topic.
            Exception: whatever ``on_progress`` raises, unchanged.
        """
        deadline = time.monotonic() + self.timeout_s
        read = 0
        try:
            while self._reader.has_message_available():
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0:
                    raise pulsar.Timeout()
                self._replay.feed(self._reader.read_next(timeout_millis=left_ms))
                read += 1
                if on_progress is not None and read % 1000 == 0:
                    on_progress(read)
        except pulsar.Timeout:
            raise OperationTimeoutError(
                f"reading {self.topic} through its last message took over {self.timeout_s:.0f}s"
            ) from None
        except pulsar.PulsarException as exc:
            raise StateTopicError(f"cannot read {self.topic}: {exc}") from exc
        self._replay.flush()
        return self._replay.state

    def add_listener(self, listener: Callable[[AppliedWrite[Op]], None]) -> None:
        """Call ``listener`` after each write this view applies (its ops, its position)."""
        self._replay.add_listener(listener)

    def follow(self, poll_s: float = 0.2) -> Iterator[S]:
        """Apply new messages as they arrive; yield the state after each message
        and after each ``poll_s`` without one (so the caller can stop).

        Returns:
            An endless iterator of the replayed state (stop iterating to end).

        Raises:
            StateTopicError: from the iterator, if the client fails reading the
                topic.
        """
        poll_ms = max(1, int(poll_s * 1000))
        while True:
            try:
                msg = self._reader.read_next(timeout_millis=poll_ms)
            except pulsar.Timeout:
                self._replay.flush()  # nothing follows for now: apply what is complete
            except pulsar.PulsarException as exc:
                raise StateTopicError(f"cannot read {self.topic}: {exc}") from exc
            else:
                self._replay.feed(msg)
            yield self._replay.state

    def close(self) -> None:
        """Close the view's reader; a failure to close is logged, never raised."""
        try:
            self._reader.close()
        except pulsar.PulsarException:
            log.debug("closing the reader of %s failed", self.topic, exc_info=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
