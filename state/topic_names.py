"""Topic names: parsing fully qualified names, and the companion topics derived from one.

Every topic name the project builds or takes apart goes through here, so that
the rules are in one place:

* a **fully qualified** name is ``persistent://tenant/namespace/name`` (or
  ``non-persistent://...`` where a plain Pulsar topic is meant, e.g. a sink's
  input); a short ``name`` means ``persistent://public/default/name``;
* a **state topic** (a manager's, map's, store's) is persistent and not a
  partition of a partitioned topic: :func:`full_topic_name` and
  :func:`admin_path` check that;
* **companion topics** are named after the topic they serve:
  ``<topic>-pss-snapshots`` (the state's snapshots), ``<topic>-pss-checkpoints``
  (a map's columnar checkpoints), ``<topic>-pss-sessions``
  (a metadata store's sessions), ``<topic>-members`` (a sink group's membership
  store, from its assignment topic), ``<name>-pss-state`` (a stateful function's
  default state topic), ``<topic>-partition-<i>`` (partition ``i``).

A name that breaks these rules raises :class:`~pulsar_state.errors.InvalidTopicNameError`
(a :class:`~pulsar_state.errors.StateTopicError` and a
:class:`~pulsar_state.errors.ConfigurationError`) saying what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

from pulsar_state.errors import InvalidTopicNameError

__all__ = [
    "checkpoint_topic",
    "DEFAULT_NAMESPACE",
    "DEFAULT_TENANT",
    "TopicName",
    "admin_path",
    "full_topic_name",
    "function_state_name",
    "function_state_topic",
    "members_topic",
    "namespace_topic",
    "parse_topic",
    "partition_topic",
    "partitioned_base",
    "sessions_topic",
    "snapshot_topic",
]

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"
_DOMAINS = (PERSISTENT, NON_PERSISTENT)
_SEPARATOR = "://"
_PARTITION_MARK = "-partition-"
_PARTITION = re.compile(r"-partition-(\d+)$")


@dataclass(frozen=True)
class TopicName:
    """A parsed topic name: ``domain://tenant/namespace/local_name``."""

    domain: str
    tenant: str
    namespace: str
    local_name: str

    def __str__(self) -> str:
        return self.full

    @property
    def full(self) -> str:
        """The fully qualified name."""
        return f"{self.domain}{_SEPARATOR}{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def is_partition(self) -> bool:
        """Whether the name is one of a partitioned topic's partitions (``-partition-``)."""
        return _PARTITION_MARK in self.local_name

    @property
    def partition_index(self) -> int | None:
        """``i`` for ``...-partition-<i>``, else ``None``."""
        found = _PARTITION.search(self.local_name)
        return int(found.group(1)) if found else None


def _check_part(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or "/" in value or value != value.strip():
        raise InvalidTopicNameError(
            f"a topic's {what} must be a non-empty name without '/' or spaces around it, "
            f"got {value!r}"
        )
    return value


def namespace_topic(tenant: str, namespace: str, local_name: str) -> str:
    """``persistent://<tenant>/<namespace>/<local_name>``, each part checked."""
    return TopicName(
        PERSISTENT,
        _check_part(tenant, "tenant"),
        _check_part(namespace, "namespace"),
        _check_part(local_name, "name"),
    ).full


def parse_topic(topic: object, *, what: str = "a topic") -> TopicName:
    """Parse ``name``, ``tenant/namespace/name`` or ``domain://tenant/namespace/name``.

    A short ``name`` is in ``public/default``; the domain is ``persistent``
    unless given. Partitions (``...-partition-<i>``) are accepted here; see
    :func:`full_topic_name` for state topics.
    """
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicNameError(f"{what} must be a non-empty str, got {topic!r}")
    domain, rest = PERSISTENT, topic
    if _SEPARATOR in topic:
        domain, rest = topic.split(_SEPARATOR, 1)
    parts = rest.split("/")
    if len(parts) == 1:
        parts = [DEFAULT_TENANT, DEFAULT_NAMESPACE, *parts]
    if domain not in _DOMAINS or len(parts) != 3 or not all(parts):
        raise InvalidTopicNameError(
            f"{what} must be [persistent://]tenant/namespace/name or a name, got {topic!r}"
        )
    return TopicName(domain, *parts)


def full_topic_name(topic: object) -> str:
    """A state topic's fully qualified name (a short name is in ``public/default``).

    Raises :class:`~pulsar_state.errors.InvalidTopicNameError` unless it is
    ``persistent://tenant/namespace/name`` (or a bare name) and not a partition.
    """
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicNameError(f"topic must be a non-empty str, got {topic!r}")
    if _SEPARATOR not in topic:
        topic = f"{PERSISTENT}{_SEPARATOR}{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}/{topic}"
    _state_topic(topic)
    return topic


def _state_topic(topic: str) -> TopicName:
    domain, rest = topic.split(_SEPARATOR, 1) if _SEPARATOR in topic else ("", topic)
    parts = rest.split("/")
    if domain != PERSISTENT or len(parts) != 3 or not all(parts):
        raise InvalidTopicNameError(
            f"a state topic must be persistent://tenant/namespace/name, got {topic!r}"
        )
    name = TopicName(domain, *parts)
    if name.is_partition:
        raise InvalidTopicNameError(f"a state topic must not be a partition: {topic!r}")
    return name


def admin_path(topic: str) -> str:
    """``persistent://t/ns/name`` -> ``persistent/t/ns/name`` for the admin REST API.

    Validated as a state topic (:func:`full_topic_name`); each part URL-quoted.
    """
    name = _state_topic(full_topic_name(topic))
    parts = (name.tenant, name.namespace, name.local_name)
    return name.domain + "/" + "/".join(quote(p, safe="") for p in parts)


# -- companion topics ------------------------------------------------------------------


def checkpoint_topic(topic: str) -> str:
    """Where a map's columnar checkpoints are kept: ``<topic>-pss-checkpoints``."""
    return f"{topic}-pss-checkpoints"


def snapshot_topic(topic: str) -> str:
    """Where a state topic's snapshots are kept: ``<topic>-pss-snapshots``."""
    return f"{topic}-pss-snapshots"


def sessions_topic(topic: str) -> str:
    """A metadata store's session topic: ``<topic>-pss-sessions``."""
    return f"{topic}-pss-sessions"


def members_topic(assignment_topic: str) -> str:
    """A sink group's default membership store: ``<assignmentTopic>-members``."""
    return f"{assignment_topic}-members"


def function_state_name(function_name: str) -> str:
    """A stateful function's default state topic's name: ``<function>-pss-state``."""
    return f"{_check_part(function_name, 'function name')}-pss-state"


def function_state_topic(tenant: str, namespace: str, function_name: str) -> str:
    """``persistent://<tenant>/<namespace>/<function>-pss-state``."""
    return namespace_topic(tenant, namespace, function_state_name(function_name))


def partitioned_base(topic: str) -> str:
    """The partitioned topic of ``...-partition-<i>``; any other topic unchanged."""
    return _PARTITION.sub("", topic)


def partition_topic(topic: str, index: int) -> str:
    """Partition ``index`` of ``topic`` (or of the topic whose partition ``topic`` is)."""
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise InvalidTopicNameError(f"a partition index is an int >= 0, got {index!r}")
    return f"{partitioned_base(topic)}{_PARTITION_MARK}{index}"
