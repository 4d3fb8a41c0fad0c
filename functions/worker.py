"""The functions worker: PIP-15's Function Runtime Manager, :class:`FunctionWorker`.

``pulsar-state worker`` runs one. A group of workers
(:class:`~pulsar_state.functions.worker_config.WorkerConfig`) follows Pulsar's
Function Metadata Topic pattern with the packaged functions, which every
worker runs itself as instances on failover subscriptions (one active at a
time; another takes over when its worker dies):

* the **metadata manager**
  (:class:`~pulsar_state.functions.metadata_manager.FunctionMetadataManager`)
  answers ``pulsar-state functions create/update/delete`` on the group's
  requests topic and keeps the records, versioned, on its metadata topic;
* **membership**: each worker heartbeats
  (:class:`~pulsar_state.functions.scheduler_member.SchedulerMember`);
* the **leader** (the active instance of
  :class:`~pulsar_state.functions.scheduler_function.SchedulerFunction`)
  keeps the live members and assigns every record's instances to them on the
  assignment topic; a member not heard from within ``member_ttl_s`` is dead
  and its instances move;
* the **runtime manager** (this class): one thread compares, every
  ``reconcile_interval_s``, the instances assigned to this worker with the
  ones it runs, starts the missing ones, stops the ones no longer assigned
  (or whose record changed: an update restarts them) and starts again, with
  a backoff, any that ended by itself: an assigned instance or one of the
  group's own functions alike (:class:`~pulsar_state.functions.instance_slot.InstanceSlot`);
* the **status**: the same thread publishes what this worker runs and each
  instance's counters into the group's status map
  (:class:`~pulsar_state.functions.worker_status.WorkerStatusPublisher`),
  which ``pulsar-state functions status`` reads.

**Code distribution**: a record's uploaded code (``package:
pss://sha256/<hex>``, in the group's package store,
:mod:`~pulsar_state.functions.package_store`) is fetched by digest into the
worker's package cache (:class:`~pulsar_state.functions.package_cache.PackageCache`,
``package_cache_dir``: kept across restarts, checked on every use) when an
instance starts, so no worker needs to see the file the function was created from.

Each instance is a :class:`~pulsar_state.functions.function_instance.FunctionInstance`
(its own thread, consumer, producer and function object). A worker that stops
(:meth:`FunctionWorker.close`) stops its instances and leaves the group (its
instances move at once); one that dies moves them after the TTL.
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar

from pulsar_state.client_log import client_logger
from pulsar_state.config import StateConfig
from pulsar_state.errors import PulsarStateError
from pulsar_state.functions.function_instance import FunctionInstance
from pulsar_state.functions.function_spec import FunctionSpec
from pulsar_state.functions.instance_slot import InstanceSlot
from pulsar_state.functions.package_cache import PackageCache, default_cache_dir
from pulsar_state.functions.package_store import PackageStore, protect_packages
from pulsar_state.functions.scheduler_member import SchedulerMember
from pulsar_state.functions.worker_config import WorkerConfig
from pulsar_state.functions.worker_status import WorkerStatusPublisher
from pulsar_state.map.pulsar_map import PulsarMap

__all__ = ["FunctionWorker", "InstanceStatus", "run_worker", "system_specs"]

log = logging.getLogger(__name__)


def system_specs(config: WorkerConfig) -> list[FunctionSpec]:
    """The group's own functions: the metadata manager and the scheduler."""
    topics = config.topics
    admin = {"adminUrl": config.admin_url} if config.admin_url else {}
    tenant_namespace = config.namespace
    return [
        FunctionSpec(
            fqn=f"{tenant_namespace}/{config.group}-metadata-manager",
            class_name="pulsar_state.functions.metadata_manager.FunctionMetadataManager",
            inputs=(topics.requests,),
            output=topics.answers,
            user_config={"metadataTopic": topics.metadata, **admin},
            retain_ordering=True,
        ),
        FunctionSpec(
            fqn=f"{tenant_namespace}/{config.group}-scheduler",
            class_name="pulsar_state.functions.scheduler_function.SchedulerFunction",
            inputs=(topics.heartbeats,),
            user_config={
                "metadataTopic": topics.metadata,
                "assignmentTopic": topics.assignments,
                "membersTopic": topics.members,
                "memberTtlSeconds": config.member_ttl_s,
                **admin,
            },
            retain_ordering=True,
            subscription_position="Earliest",
        ),
    ]


@dataclass
class InstanceStatus:
    """What the worker knows of one instance it runs."""

    instance: str
    version: int
    running: bool
    restarts: int
    error: str | None
    #: :meth:`~pulsar_state.functions.instance_counters.InstanceCounters.snapshot`
    counters: dict[str, Any] = field(default_factory=dict)

    def published(self, worker_id: str) -> dict[str, Any]:
        """The instance's entry in the group's status map (``pulsar-admin``'s field names).

        Returns:
            ``version``, ``running``, ``error``, ``numRestarts``, ``workerId`` and the counters.
        """
        return {
            "version": self.version,
            "running": self.running,
            "error": self.error or "",
            "numRestarts": self.restarts,
            "workerId": worker_id,
            **self.counters,
        }


def _split(instance: str) -> tuple[str, int]:
    fqn, _, index = instance.rpartition(":")
    return fqn, int(index)


class FunctionWorker:
    """See the module docstring."""

    def __init__(
        self, config: WorkerConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self._clock = clock
        self.worker_id = config.worker_id
        self._work_dir = Path(
            config.work_dir or tempfile.mkdtemp(prefix=f"pss-worker-{config.worker_id}-")
        )
        self._client: pulsar.Client | None = None
        #: the uploaded code packages this worker has fetched (set by :meth:`start`)
        self.packages: PackageCache | None = None
        #: the group's own functions, by instance id
        self._system: dict[str, InstanceSlot] = {}
        self._member: SchedulerMember | None = None
        self._records: PulsarMap[str, Any] | None = None
        self._assignments: PulsarMap[str, str] | None = None
        self._status: WorkerStatusPublisher | None = None
        self._slots: dict[str, InstanceSlot] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: reconciliations done (each compares the assignment with what runs)
        self.reconciles = 0

    def start(self) -> FunctionWorker:
        """Connect, run the group's functions, join the membership, start reconciling.

        Raises:
            PulsarStateError: a topic cannot be opened (``StateTopicError``...).
        """
        config = self.config
        self._client = pulsar.Client(
            config.service_url, logger=client_logger(), **config.client_kwargs()
        )
        topics = config.topics
        if config.admin_url:
            protect_packages(config.auth.admin_endpoint(config.admin_url), topics.packages)
        self.packages = PackageCache(
            Path(config.package_cache_dir or default_cache_dir()),
            PackageStore(self._client, topics.packages),
        )
        self._start_system()
        reader = StateConfig(ensure_retention=False)  # the group's functions protect them
        self._records = PulsarMap(self._client, topics.metadata, config=reader)
        self._assignments = PulsarMap(self._client, topics.assignments, config=reader)
        self._member = SchedulerMember(
            self._client,
            member_id=self.worker_id,
            heartbeat_topic=topics.heartbeats,
            assignment_topic=topics.assignments,
            interval_s=config.heartbeat_interval_s,
        )
        self._status = self._status_publisher()
        self._thread = threading.Thread(
            target=self._reconcile_loop, name=f"pss-worker-{self.worker_id}", daemon=True
        )
        self._thread.start()
        log.info("worker %s started (group %s)", self.worker_id, config.group)
        return self

    def _status_publisher(self) -> WorkerStatusPublisher | None:
        """Where this worker publishes its instances' counters; ``None`` (logged) when
        the status map cannot be opened: the worker runs its instances all the same."""
        assert self._client is not None
        config = self.config
        admin = config.auth.admin_endpoint(config.admin_url) if config.admin_url else None
        try:
            return WorkerStatusPublisher(
                self._client,
                config.topics.status,
                self.worker_id,
                admin=admin,
                interval_s=config.heartbeat_interval_s,
                refresh_s=config.member_ttl_s,
                expire_s=max(60.0, 10 * config.member_ttl_s),
                clock=self._clock,
            )
        except (PulsarStateError, pulsar.PulsarException) as exc:
            log.warning("worker %s publishes no status: %s", self.worker_id, exc)
            return None

    def _system_instance(self, spec: FunctionSpec) -> FunctionInstance:
        """One of the group's own functions, its consumer named after this worker."""
        assert self._client is not None
        return FunctionInstance(
            spec,
            0,
            self._client,
            work_dir=self._work_dir,
            consumer_name=self.worker_id,
            secrets=self.config.secrets(),
        ).start()

    def _start_system(self) -> None:
        """Start the group's own functions (each in a slot of its own)."""
        self._system = {
            f"{spec.fqn}:0": InstanceSlot(self._system_instance(spec))
            for spec in system_specs(self.config)
        }

    # -- the runtime manager -----------------------------------------------------------------

    def _reconcile_loop(self) -> None:
        while not self._stop.is_set():
            self._restart_system()
            try:
                self.reconcile()
            except (PulsarStateError, pulsar.PulsarException, TimeoutError) as exc:
                log.warning("worker %s could not reconcile: %s", self.worker_id, exc)
            except Exception:
                log.exception("worker %s: reconciling failed", self.worker_id)
            self._publish_status()
            self._stop.wait(self.config.reconcile_interval_s)

    def _restart_system(self) -> None:
        """Start again, after its backoff, each of the group's functions that ended."""
        now = self._clock()
        for name, slot in list(self._system.items()):
            if self._stop.is_set():
                return
            if slot.restart_due(now):
                log.warning("worker %s restarts %s", self.worker_id, name)
                self._system[name] = slot.restarted(self._system_instance(slot.runner.spec))

    def _publish_status(self) -> None:
        """Publish this worker's instances and their counters (when it is time)."""
        if self._status is None or self._stop.is_set():
            return
        try:
            self._status.publish({s.instance: s.published(self.worker_id) for s in self.status()})
        except Exception:  # advisory: never stops the runtime manager
            log.warning("worker %s could not publish its status", self.worker_id, exc_info=True)

    def wanted(self) -> dict[str, FunctionSpec]:
        """Instance id -> spec of every instance assigned to this worker whose record is good."""
        if self._records is None or self._assignments is None:
            return {}
        assigned = self._assignments.items(latest=True).result(timeout=60)
        records = self._records.items(latest=True).result(timeout=60)
        wanted: dict[str, FunctionSpec] = {}
        for instance, member in sorted(assigned.items()):
            if member != self.worker_id:
                continue
            fqn, index = _split(instance)
            if fqn not in records:
                continue  # deleted; the leader removes the assignment next
            try:
                spec = FunctionSpec.from_record(fqn, records[fqn])
            except ValueError as exc:
                log.warning("not running %s: %s", instance, exc)
                continue
            if index < spec.parallelism:
                wanted[instance] = spec
        return wanted

    def reconcile(self) -> None:
        """Start what is assigned and not running; stop what runs and is not assigned."""
        wanted = self.wanted()
        with self._lock:
            if self._stop.is_set():
                return
            removed = [i for i, s in self._slots.items() if wanted.get(i) != s.runner.spec]
            stopping = [self._slots.pop(i).runner for i in sorted(removed)]
        for runner in stopping:  # before its successor starts (an update restarts it)
            log.info("worker %s stops %s", self.worker_id, runner.name)
            runner.stop()
        with self._lock:
            if self._stop.is_set():
                return
            now = self._clock()
            for instance, spec in wanted.items():
                existing = self._slots.get(instance)
                if existing is not None and not existing.restart_due(now):
                    continue  # it runs, or ended by itself and waits for its backoff
                log.info("worker %s starts %s (version %d)", self.worker_id, instance, spec.version)
                runner = self._runner(spec, _split(instance)[1]).start()
                self._slots[instance] = (
                    InstanceSlot(runner) if existing is None else existing.restarted(runner)
                )
            self.reconciles += 1

    def _runner(self, spec: FunctionSpec, index: int) -> FunctionInstance:
        assert self._client is not None
        return FunctionInstance(
            spec,
            index,
            self._client,
            work_dir=self._work_dir,
            secrets=spec.resolve_secrets(os.environ),
            packages=self.packages,
        )

    def status(self) -> list[InstanceStatus]:
        """The instances this worker runs (or restarts), by id."""
        with self._lock:
            slots = sorted(self._slots.items())
        return [
            InstanceStatus(
                instance=instance,
                version=slot.runner.spec.version,
                running=slot.runner.alive,
                restarts=slot.restarts,
                error=slot.runner.error,
                counters=slot.runner.counters.snapshot(),
            )
            for instance, slot in slots
        ]

    def running(self) -> list[str]:
        """The ids of the instances this worker runs now, sorted."""
        return [s.instance for s in self.status() if s.running]

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self, leave: bool = True) -> None:
        """Stop the instances, leave the group (``leave=False``: as if it died), disconnect."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
        with self._lock:
            slots, self._slots = list(self._slots.values()), {}
        for slot in slots:
            slot.runner.stop()
        if self._status is not None:
            self._status.close(remove=leave)
        if self._member is not None:
            self._member.close(leave=leave)
        for system in self._system.values():
            system.runner.stop()
        for state_map in (self._records, self._assignments):
            if state_map is not None:
                state_map.close()
        if self._client is not None:
            self._client.close()
        log.info("worker %s stopped", self.worker_id)

    def __enter__(self) -> FunctionWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_worker(config: WorkerConfig) -> None:
    """Run a worker in this process until SIGTERM or SIGINT, then stop it and leave.

    What ``pulsar-state worker`` runs; a process started by ``fork`` or
    ``spawn`` can run it too (call it from the process's main thread).
    """
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    worker = FunctionWorker(config).start()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        worker.close()
