"""A group of ``pulsar-state sink run`` processes sharing one sink's input partitions.

Runners with the same sink ``name`` and ``assignmentTopic`` form a group. Each
runner is a member of a :class:`~pulsar_state.scheduling.scheduler.Scheduler`
(root ``/pss-sink-groups/<name>`` in the metadata store on
``membershipTopic``). The sink is the function ``tenant/namespace/sink-<name>``
(the input topic's tenant and namespace) whose parallelism is the number of
partitions of the input, so instance ``...:i`` is partition ``i``; a
non-partitioned input is one instance, the topic itself. The elected leader
assigns instances round-robin with minimal movement and publishes them to the
compacted assignment map; every runner reads its own.

Hand-over. A partition is consumed through an **exclusive** consumer on
``<topic>-partition-<i>`` with the sink's subscription, so two runners never
consume a partition at the same time. A runner that loses a partition closes
its consumer between two records (never while one is being written); a runner
that gains one retries the subscription while the previous owner still holds
it. What was received but not acknowledged is redelivered to the new owner and
skipped by the database: positions are stored per partition topic
(:mod:`.sql_backend`), the same keys as a failover subscription on the
partitioned topic writes. A record the new owner gets past records the old one
had not written is held until they come (the takeover-gap check, :mod:`.sink`).

Timing. A runner that stops cleanly deletes its member node at once; one that
dies (``kill -9``) loses it within ``sessionTimeoutS + sessionCheckIntervalS``
(see :mod:`pulsar_state.metadata.store`). The leader (re-elected first if it
was the one that died) then moves the dead runner's partitions in one write,
and their new owners subscribe within about a second.

Config keys (beside those of :mod:`.sink_runner`); the group is on when
``assignmentTopic`` is set:

* ``assignmentTopic``: the compacted assignment map, **one per sink group**
  (its leader owns every key in it);
* ``membershipTopic``: the metadata store of members, leader and the sink's
  function record (default ``<assignmentTopic>-members``); may be shared by
  sinks of different names;
* ``memberId``: this runner's name in the group (default ``<hostname>-<pid>``);
  left out of the sink's metadata record;
* ``sessionTimeoutS`` (default 10), ``sessionCheckIntervalS`` (default 1);
* ``adminUrl`` is required (the metadata store's topic protection and sessions).

Limits: partitions added to the input later are picked up when a runner
(re)starts (it re-registers the parallelism). Everything here runs on the
runner's own thread, except the scheduler's and the metadata store's threads.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulsar

from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.errors import (
    ConfigurationError,
    InvalidTopicNameError,
    PulsarStateError,
    StateClosedError,
    StateTopicError,
)
from pulsar_state.map.pulsar_map import PulsarMap
from pulsar_state.metadata.store import MetadataStore
from pulsar_state.scheduling.scheduler import LEADER_KEY, Scheduler
from pulsar_state.topic_names import full_topic_name, members_topic, parse_topic, partition_topic

__all__ = [
    "LOCAL_KEYS",
    "GroupSettings",
    "PartitionConsumers",
    "SinkGroup",
    "input_namespace",
    "sink_function",
]

log = logging.getLogger(__name__)

#: config keys that differ between the runners of one group (not in the metadata record)
LOCAL_KEYS = frozenset({"memberId"})

#: how often the runner compares its consumers with its assignment
FOLLOW_INTERVAL_S = 0.25
#: how often it checks that its member node still exists
REJOIN_INTERVAL_S = 2.0
#: the sleep between two rounds of polling idle consumers
_IDLE_POLL_S = 0.02
_RETRY_FIRST_S = 0.2
_RETRY_MAX_S = 2.0

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _text(config: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = config.get(key, default)
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"sink config {key!r} must be a non-empty string, got {value!r}")
    return value


def _seconds(config: Mapping[str, Any], key: str, default: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(f"sink config {key!r} must be a number > 0, got {value!r}")
    return float(value)


def _topic(config: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = _text(config, key, default)
    try:
        return full_topic_name(value)
    except StateTopicError as exc:
        raise ConfigurationError(f"sink config {key!r}: {exc}") from exc


def input_namespace(topic: str) -> tuple[str, str]:
    """``(tenant, namespace)`` of the input topic (a short name is ``public/default``)."""
    parsed = parse_topic(topic, what="sink 'topic'")
    if parsed.is_partition:
        raise InvalidTopicNameError(
            f"sink 'topic' must be the topic, not one of its partitions, got {topic!r}"
        )
    return parsed.tenant, parsed.namespace


def sink_function(topic: str, name: str) -> str:
    """The function a sink group schedules: ``tenant/namespace/sink-<name>``."""
    tenant, namespace = input_namespace(topic)
    return f"{tenant}/{namespace}/sink-{name}"


@dataclass(frozen=True)
class GroupSettings:
    """The group's part of a runner config, validated (see the module docstring)."""

    name: str
    assignment_topic: str
    membership_topic: str
    member_id: str
    admin_url: str
    session_timeout_s: float = 10.0
    session_check_interval_s: float = 1.0
    #: the admin API at ``admin_url`` with the runner's credentials and TLS trust
    #: (``ClusterAuth.admin_endpoint``), set by the runner; ``None``: the bare URL
    admin: AdminEndpoint | None = field(default=None, repr=False, compare=False)

    def admin_endpoint(self) -> AdminEndpoint:
        """:attr:`admin`, else ``admin_url`` with no credentials."""
        return self.admin if self.admin is not None else AdminEndpoint(url=self.admin_url)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> GroupSettings | None:
        """The settings, or ``None`` without ``assignmentTopic`` (one failover runner)."""
        if config.get("assignmentTopic") is None:
            for key in ("membershipTopic", "memberId", "sessionTimeoutS", "sessionCheckIntervalS"):
                if key in config:
                    raise ConfigurationError(f"sink config {key!r} needs 'assignmentTopic'")
            return None
        assignment_topic = _topic(config, "assignmentTopic")
        membership_topic = _topic(config, "membershipTopic", members_topic(assignment_topic))
        if membership_topic == assignment_topic:
            raise ConfigurationError(
                "sink config 'membershipTopic' must differ from 'assignmentTopic'"
            )
        metadata = config.get("metadataTopic")
        if metadata and _topic(config, "metadataTopic") in (assignment_topic, membership_topic):
            raise ConfigurationError(
                "sink config 'metadataTopic' must differ from 'assignmentTopic' "
                "and 'membershipTopic'"
            )
        admin_url = config.get("adminUrl")
        if not isinstance(admin_url, str) or not admin_url.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"sink config 'assignmentTopic' needs 'adminUrl' (http[s]://...), got {admin_url!r}"
            )
        name = _text(config, "name", config.get("subscription"))
        if not _NAME.fullmatch(name):
            raise ConfigurationError(
                f"sink config 'name' must be letters, digits, '.', '_' or '-' in a group, "
                f"got {name!r}"
            )
        member_id = _text(config, "memberId", f"{socket.gethostname()}-{os.getpid()}")
        if not _NAME.fullmatch(member_id):
            raise ConfigurationError(
                f"sink config 'memberId' must be letters, digits, '.', '_' or '-', "
                f"got {member_id!r}"
            )
        timeout = _seconds(config, "sessionTimeoutS", cls.session_timeout_s)
        interval = _seconds(config, "sessionCheckIntervalS", cls.session_check_interval_s)
        sink_function(_text(config, "topic"), name)  # validates the input's namespace
        return cls(
            name=name,
            assignment_topic=assignment_topic,
            membership_topic=membership_topic,
            member_id=member_id,
            admin_url=admin_url,
            session_timeout_s=timeout,
            session_check_interval_s=interval,
        )


class PartitionConsumers:
    """Exclusive consumers of the partitions this runner owns; one thread drives it.

    :meth:`follow` closes the consumers of partitions no longer wanted and
    subscribes to the new ones (retried with backoff while another consumer
    holds the subscription); :meth:`poll` takes a message from any of them,
    round-robin.
    """

    def __init__(
        self,
        client: pulsar.Client,
        partitions: list[str],
        subscription: str,
        *,
        consumer_name: str,
    ) -> None:
        self.client = client
        self.partitions = partitions
        self.subscription = subscription
        self.consumer_name = consumer_name
        self._consumers: dict[int, pulsar.Consumer] = {}
        self._retry: dict[int, tuple[float, float]] = {}  # partition -> (next try, backoff)
        self._turn = 0

    def topic(self, index: int) -> str:
        """The topic of instance ``index``: its partition (or the unpartitioned topic)."""
        if index < len(self.partitions):
            return self.partitions[index]
        return partition_topic(self.partitions[0], index)

    @property
    def held(self) -> list[int]:
        return sorted(self._consumers)

    @property
    def waiting(self) -> list[int]:
        return sorted(self._retry)

    def follow(self, wanted: set[int]) -> None:
        for index in [i for i in self._consumers if i not in wanted]:
            self._close(index)
        for index in [i for i in self._retry if i not in wanted]:
            del self._retry[index]
        now = time.monotonic()
        for index in sorted(wanted - self._consumers.keys()):
            next_try, backoff = self._retry.get(index, (now, _RETRY_FIRST_S))
            if now < next_try:
                continue
            topic = self.topic(index)
            try:
                self._consumers[index] = self.client.subscribe(
                    topic,
                    self.subscription,
                    consumer_type=pulsar.ConsumerType.Exclusive,
                    initial_position=pulsar.InitialPosition.Earliest,
                    consumer_name=self.consumer_name,
                )
            except pulsar.PulsarException as exc:
                if index not in self._retry:
                    log.info("partition %d not free yet (%s); retrying", index, exc)
                self._retry[index] = (now + backoff, min(backoff * 2, _RETRY_MAX_S))
                continue
            self._retry.pop(index, None)
            log.info("%s consumes %s", self.consumer_name, topic)

    def poll(self) -> tuple[pulsar.Message, pulsar.Consumer] | None:
        """A message received by any consumer, without waiting; ``None`` if none has one."""
        held = sorted(self._consumers)
        for k in range(len(held)):
            index = held[(self._turn + k) % len(held)]
            consumer = self._consumers[index]
            try:
                msg = consumer.receive(timeout_millis=0)
            except pulsar.Timeout:
                continue
            except pulsar.PulsarException:
                log.warning("consumer of partition %d failed; resubscribing", index, exc_info=True)
                self._close(index)
                continue
            self._turn = (self._turn + k + 1) % len(held)
            return msg, consumer
        return None

    def _close(self, index: int) -> None:
        consumer = self._consumers.pop(index)
        try:
            consumer.close()
        except pulsar.PulsarException:
            log.debug("closing the consumer of partition %d failed", index, exc_info=True)
        log.info("%s released %s", self.consumer_name, self.topic(index))

    def close(self) -> None:
        for index in list(self._consumers):
            self._close(index)
        self._retry.clear()


class SinkGroup:
    """This runner's place in its sink group: membership, assignment, consumers.

    ``start`` joins (it connects: call it where the runner runs); ``receive``
    follows the assignment and returns the next record of an owned partition;
    ``close`` releases the partitions first, then leaves the group, so the
    others take them over at once.
    """

    def __init__(
        self, client: pulsar.Client, settings: GroupSettings, *, topic: str, subscription: str
    ) -> None:
        self.client = client
        self.settings = settings
        self.topic = topic
        self.subscription = subscription
        self.function = sink_function(topic, settings.name)
        self.root = f"/pss-sink-groups/{settings.name}"
        self._store: MetadataStore | None = None
        self._assignments: PulsarMap[str, str] | None = None
        self._scheduler: Scheduler | None = None
        self._consumers: PartitionConsumers | None = None
        self._next_follow = 0.0
        self._next_rejoin = 0.0
        self._owned: list[int] = []

    @property
    def scheduler(self) -> Scheduler:
        if self._scheduler is None:
            raise ConfigurationError("the sink group is not started")
        return self._scheduler

    @property
    def consumers(self) -> PartitionConsumers:
        if self._consumers is None:
            raise ConfigurationError("the sink group is not started")
        return self._consumers

    def start(self) -> SinkGroup:
        s = self.settings
        partitions = list(self.client.get_topic_partitions(self.topic))
        try:
            self._store = MetadataStore(
                self.client,
                s.membership_topic,
                admin=s.admin_endpoint(),
                session_timeout_s=s.session_timeout_s,
                session_check_interval_s=s.session_check_interval_s,
            )
            self._assignments = PulsarMap[str, str](
                self.client,
                s.assignment_topic,
                admin=s.admin_endpoint(),
            )
            foreign = [
                k
                for k in self._assignments.list_keys(latest=True).result(timeout=60)
                if k != LEADER_KEY and not k.startswith(f"{self.function}:")
            ]
            if foreign:
                raise ConfigurationError(
                    f"assignmentTopic {s.assignment_topic} holds assignments of other functions "
                    f"({', '.join(sorted(foreign)[:3])}); each sink group needs its own"
                )
            self._consumers = PartitionConsumers(
                self.client, partitions, self.subscription, consumer_name=s.member_id
            )
            self._scheduler = Scheduler(
                self._store, self._assignments, member_id=s.member_id, root=self.root
            )
            self._register(len(partitions))
            self._scheduler.start()
        except BaseException:
            self.close()
            raise
        log.info(
            "%s joined sink group %s (%d partitions of %s)",
            s.member_id,
            self.function,
            len(partitions),
            self.topic,
        )
        return self

    def _register(self, parallelism: int) -> None:
        """Record the parallelism unless it is already the recorded one."""
        if self.scheduler.parallelism(self.function) != parallelism:
            self.scheduler.set_function(self.function, parallelism)

    def owned(self) -> list[int]:
        """The partitions assigned to this runner, as the local assignment map says."""
        prefix = f"{self.function}:"
        return sorted(
            int(i[len(prefix) :])
            for i in self.scheduler.my_assignments(latest=False)
            if i.startswith(prefix) and i[len(prefix) :].isdigit()
        )

    def _follow(self) -> None:
        now = time.monotonic()
        try:
            if now >= self._next_rejoin:
                self._next_rejoin = now + REJOIN_INTERVAL_S
                if self.scheduler.rejoin():
                    log.warning("%s lost its member node; joined again", self.settings.member_id)
            owned = self.owned()
        except StateClosedError:
            raise
        except PulsarStateError:  # keep the partitions held (exclusive); try again soon
            log.warning("reading the assignment failed; retrying", exc_info=True)
            return
        if owned != self._owned:
            log.info("%s is assigned partitions %s", self.settings.member_id, owned)
            self._owned = owned
        self.consumers.follow(set(owned))

    def receive(self, timeout_ms: int) -> tuple[pulsar.Message, pulsar.Consumer] | None:
        """The next record of an owned partition, or ``None`` after ``timeout_ms``."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            now = time.monotonic()
            if now >= self._next_follow:
                self._next_follow = now + FOLLOW_INTERVAL_S
                self._follow()
            got = self.consumers.poll()
            if got is not None:
                return got
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            time.sleep(min(_IDLE_POLL_S, remaining))

    def close(self) -> None:
        if self._consumers is not None:
            self._consumers.close()
        if self._scheduler is not None:
            self._scheduler.close()
            self._scheduler = None
        if self._assignments is not None:
            self._assignments.close()
            self._assignments = None
        if self._store is not None:
            self._store.close()  # deletes the member node: the others take over now
            self._store = None
