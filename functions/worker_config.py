"""A group of ``pulsar-state worker`` processes: its topics and settings, :class:`WorkerConfig`.

Workers of one group share eight topics in one namespace, named after the
group (``<group>-<part>``), as Pulsar's workers share the topics of
``pulsarFunctionsNamespace``:

========== ===================================================================
part       what
========== ===================================================================
metadata   the function records (a ``PulsarMap``: fqn -> record)
requests   requests to the metadata manager (create, update, delete, get)
answers    the metadata manager's answers
heartbeats the members' heartbeats (the scheduler's input)
members    the live members (the scheduler's map)
assignments instance id ``tenant/ns/name:i`` -> member id
status     each worker's instances and their counters (worker id -> status)
packages   the uploaded code packages, by sha256
           (:mod:`~pulsar_state.functions.package_store`)
========== ===================================================================

``pulsar-state functions create ...`` names the same group to reach them.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.topic_names import namespace_topic

__all__ = ["DEFAULT_GROUP", "DEFAULT_NAMESPACE", "WorkerConfig", "WorkerTopics"]

#: the group's default name and namespace
DEFAULT_GROUP = "pss-functions"
DEFAULT_NAMESPACE = "public/default"

_PARTS = (
    "metadata",
    "requests",
    "answers",
    "heartbeats",
    "members",
    "assignments",
    "status",
    "packages",
)


@dataclass(frozen=True)
class WorkerTopics:
    """The topics of a group of workers (see the module docstring)."""

    metadata: str
    requests: str
    answers: str
    heartbeats: str
    members: str
    assignments: str
    status: str
    packages: str

    @classmethod
    def of(cls, group: str = DEFAULT_GROUP, namespace: str = DEFAULT_NAMESPACE) -> WorkerTopics:
        """The topics of ``group`` in ``namespace`` (``tenant/namespace``).

        Raises:
            ValueError: ``namespace`` is not ``tenant/namespace``, or a name is bad.
        """
        tenant, _, local = namespace.partition("/")
        if not tenant or not local or "/" in local:
            raise ValueError(f"namespace is tenant/namespace, got {namespace!r}")
        names = {part: namespace_topic(tenant, local, f"{group}-{part}") for part in _PARTS}
        return cls(**names)


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}".replace("/", "-")


@dataclass(frozen=True)
class WorkerConfig:
    """One worker's settings (picklable: a process started by ``spawn`` gets it whole)."""

    service_url: str
    #: protects the group's topics and the functions' state topics (infinite retention)
    admin_url: str | None = None
    group: str = DEFAULT_GROUP
    namespace: str = DEFAULT_NAMESPACE
    worker_id: str = field(default_factory=_default_worker_id)
    #: a member not heard from within this is dead; its instances move
    member_ttl_s: float = 10.0
    #: how often the worker compares what is assigned to it with what runs
    reconcile_interval_s: float = 1.0
    #: where ``.zip`` code packages are unpacked (default: a folder in the temp dir)
    work_dir: str | None = None
    #: where packages fetched from the group's package store are kept, across restarts
    #: (default: :func:`~pulsar_state.functions.package_cache.default_cache_dir`)
    package_cache_dir: str | None = None
    #: the client's authentication and TLS trust; its token (if any) is also the
    #: ``adminToken`` secret of the group's own functions
    auth: ClusterAuth = field(default_factory=ClusterAuth)

    def __post_init__(self) -> None:
        if not self.worker_id or "/" in self.worker_id:
            raise ValueError(f"worker_id must be a non-empty name without '/': {self.worker_id!r}")
        if self.member_ttl_s <= 0 or self.reconcile_interval_s <= 0:
            raise ValueError("member_ttl_s and reconcile_interval_s must be > 0")

    @property
    def topics(self) -> WorkerTopics:
        return WorkerTopics.of(self.group, self.namespace)

    def client_kwargs(self) -> dict[str, Any]:
        """``pulsar.Client`` keyword arguments: authentication and TLS trust."""
        return self.auth.client_kwargs()

    def secrets(self) -> dict[str, str]:
        """The secrets of the group's own functions: ``adminToken`` when authenticated by one."""
        token = self.auth.token()
        return {"adminToken": token} if token else {}

    @property
    def heartbeat_interval_s(self) -> float:
        """A quarter of the TTL: a member misses three heartbeats before it is dead."""
        return self.member_ttl_s / 4
