"""The client side of a worker group: :class:`FunctionAdmin`, what ``pulsar-state functions`` uses.

Writes go **through the metadata manager** the group's workers run
(:class:`~pulsar_state.functions.metadata_manager.FunctionMetadataManager`):
a request with a fresh ``requestId`` on the requests topic, and its answer
read from the answers topic (a reader placed at the end *before* the request
is sent, so the answer cannot be missed). The manager checks the config and
the version: an update or delete with an ``expectedVersion`` that is not the
current one is refused as stale, as Pulsar's worker refuses it.

**Code is uploaded**: a config whose ``py`` is a local file (``create``,
``update``) has the file's bytes put into the group's package store first
(:class:`~pulsar_state.functions.package_store.PackageStore`, the group's
``packages`` topic, by sha256; a file over
:data:`~pulsar_state.functions.package_manifest.MAX_PACKAGE_BYTES` is refused
before anything is written), and the record names ``package:
pss://sha256/<hex>`` with ``py`` the file's name: workers fetch it by digest,
none needs to see the file. A ``py`` given as ``file://PATH`` (a shared
filesystem) or an ``http(s)://`` URL is recorded as it is (``upload=False``
records every ``py`` as it is); a config that already names a ``package`` is
not uploaded again.

Reads need no worker: the records, the assignment, the members and the
workers' status (:mod:`~pulsar_state.functions.worker_status`) are
``PulsarMap`` s on the group's topics, read here directly
(:meth:`FunctionAdmin.list_functions`, :meth:`FunctionAdmin.status`).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar

from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.config import StateConfig
from pulsar_state.errors import ConfigurationError, OperationTimeoutError, PulsarStateError
from pulsar_state.functions.package_manifest import check_size, valid_file_name
from pulsar_state.functions.package_store import PackageStore, protect_packages
from pulsar_state.functions.worker_config import WorkerTopics
from pulsar_state.map.pulsar_map import PulsarMap

__all__ = ["INSTANCE_STATUS_FIELDS", "FunctionAdmin", "FunctionRequestError", "InstancePlacement"]

#: an instance's status fields, as ``pulsar-admin functions status`` has them, and
#: their values for an instance no worker has reported yet
INSTANCE_STATUS_FIELDS: dict[str, Any] = {
    "running": False,
    "error": "",
    "numRestarts": 0,
    "numReceived": 0,
    "numSuccessfullyProcessed": 0,
    "numUserExceptions": 0,
    "latestUserExceptions": [],
    "numSystemExceptions": 0,
    "latestSystemExceptions": [],
    "averageLatency": 0.0,
    "lastInvocationTime": 0,
    "workerId": None,
}


class FunctionRequestError(PulsarStateError):
    """The metadata manager refused a request (bad config, not found, a stale version)."""


@dataclass(frozen=True)
class InstancePlacement:
    """Where one instance of a function is assigned, whether that worker is alive,
    and what that worker last published of it (``None``: nothing yet)."""

    instance: str
    worker: str | None
    worker_alive: bool
    reported: dict[str, Any] | None = None

    @property
    def running(self) -> bool:
        """Its worker is alive and says the instance runs."""
        return self.worker_alive and bool((self.reported or {}).get("running"))

    def status(self) -> dict[str, Any]:
        """The instance's status as ``pulsar-admin functions status`` prints it.

        Returns:
            :data:`INSTANCE_STATUS_FIELDS`, with what its worker reported;
            ``running`` only while that worker is alive, ``workerId`` the one
            it is assigned to.
        """
        reported = self.reported or {}
        status = {k: reported.get(k, default) for k, default in INSTANCE_STATUS_FIELDS.items()}
        status["running"], status["workerId"] = self.running, self.worker
        return status


def _alive(record: Any, now_ms: int) -> bool:
    if not isinstance(record, dict) or record.get("left"):
        return False
    expires = record.get("expires")
    return isinstance(expires, int) and expires >= now_ms


class FunctionAdmin:
    """Create, update, delete, get, list and place the functions of a worker group."""

    def __init__(
        self,
        client: pulsar.Client,
        topics: WorkerTopics,
        *,
        timeout_s: float = 30.0,
        upload: bool = True,
        admin: AdminEndpoint | None = None,
    ):
        """``upload``: put a local ``py`` file into the group's package store (see the
        module docstring); ``admin``: protects the store's topic on the first upload."""
        self._client = client
        self.topics = topics
        self.timeout_s = timeout_s
        self.upload_code = upload
        self._admin = admin
        self._protected = False

    # -- code packages ------------------------------------------------------------------------

    def upload(self, path: str | Path) -> dict[str, str]:
        """Put the file ``path`` (a ``.py`` or ``.zip``) into the group's package store.

        Returns:
            the record's code fields: ``py`` (the file's name) and ``package``
            (``pss://sha256/<hex>``).

        Raises:
            ConfigurationError: not a readable ``.py``/``.zip`` file, or over the size
                limit (``PackageTooLargeError``; nothing is written).
        """
        file = Path(path).expanduser()
        if not valid_file_name(file.name):
            raise ConfigurationError(f"code package {str(path)!r}: a .py file or a .zip")
        try:
            check_size(file.stat().st_size, str(path))
            data = file.read_bytes()
        except OSError as exc:
            raise ConfigurationError(f"cannot read code package {str(path)!r}: {exc}") from exc
        if self._admin is not None and not self._protected:
            protect_packages(self._admin, self.topics.packages)
            self._protected = True
        store = PackageStore(self._client, self.topics.packages, timeout_s=self.timeout_s)
        manifest = store.upload(data, str(path))
        return {"py": file.name, "package": manifest.url}

    def _with_code(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` with a local ``py`` file uploaded (see the module docstring)."""
        py = config.get("py")
        if not self.upload_code or "package" in config or not isinstance(py, str) or not py:
            return config
        if py.startswith(("file://", "http://", "https://")):
            return config
        if "://" in py:
            raise ConfigurationError(
                f"code package {py!r}: give a file (uploaded into the group's package store), "
                "file://PATH on a filesystem every worker shares, or an http(s):// URL"
            )
        return {**config, **self.upload(py)}

    # -- writes, through the metadata manager -----------------------------------------------

    def request(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request to the metadata manager; its answer when ``ok``.

        Raises:
            FunctionRequestError: the manager refused it (its reason).
            OperationTimeoutError: no answer within ``timeout_s`` (no worker runs?).
        """
        request_id = uuid.uuid4().hex
        reader = self._client.create_reader(self.topics.answers, pulsar.MessageId.latest)
        producer = self._client.create_producer(self.topics.requests)
        try:
            producer.send(json.dumps({**request, "requestId": request_id}).encode())
            deadline = time.monotonic() + self.timeout_s
            while (left := deadline - time.monotonic()) > 0:
                try:
                    message = reader.read_next(timeout_millis=max(1, int(left * 1000)))
                except pulsar.Timeout:
                    break
                try:
                    answer = json.loads(message.data())
                except ValueError:
                    continue
                if isinstance(answer, dict) and answer.get("requestId") == request_id:
                    if not answer.get("ok"):
                        raise FunctionRequestError(str(answer.get("error")))
                    return answer
        finally:
            producer.close()
            reader.close()
        raise OperationTimeoutError(
            f"no answer from the metadata manager on {self.topics.requests} within "
            f"{self.timeout_s:.0f} s: is a `pulsar-state worker` of this group running?"
        )

    def create(self, fqn: str, config: dict[str, Any]) -> dict[str, Any]:
        """Record a new function (its local ``py`` file uploaded first); its record (version 0).

        Raises:
            FunctionRequestError: it exists, or the config is refused.
            ConfigurationError: its ``py`` file cannot be uploaded (unreadable, too large).
            OperationTimeoutError: no answer.
        """
        config = self._with_code(config)
        return dict(self.request({"op": "create", "fqn": fqn, "config": config})["record"])

    def update(
        self, fqn: str, config: dict[str, Any], expected_version: int | None = None
    ) -> dict[str, Any]:
        """Replace a function's config (its local ``py`` file uploaded first); its new
        record. With ``expected_version``, refused unless that is the current version
        (a stale update).

        Raises:
            FunctionRequestError: not found, stale, or the config is refused.
            ConfigurationError: its ``py`` file cannot be uploaded (unreadable, too large).
            OperationTimeoutError: no answer.
        """
        request: dict[str, Any] = {"op": "update", "fqn": fqn, "config": self._with_code(config)}
        if expected_version is not None:
            request["expectedVersion"] = expected_version
        return dict(self.request(request)["record"])

    def delete(self, fqn: str, expected_version: int | None = None) -> dict[str, Any]:
        """Delete a function's record; the record it was.

        Raises:
            FunctionRequestError: not found, or stale.
            OperationTimeoutError: no answer.
        """
        request: dict[str, Any] = {"op": "delete", "fqn": fqn}
        if expected_version is not None:
            request["expectedVersion"] = expected_version
        return dict(self.request(request)["record"])

    # -- reads, from the maps -------------------------------------------------------------------

    def _read(self, topic: str) -> dict[str, Any]:
        with PulsarMap[str, Any](
            self._client, topic, config=StateConfig(ensure_retention=False)
        ) as state:
            return dict(state.items(latest=True).result(timeout=self.timeout_s))

    def get(self, fqn: str) -> dict[str, Any] | None:
        """A function's record, ``None`` when there is none."""
        record = self._read(self.topics.metadata).get(fqn)
        return dict(record) if isinstance(record, dict) else None

    def list_functions(self, tenant: str | None = None, namespace: str | None = None) -> list[str]:
        """The functions recorded (their fqn), sorted; of one tenant or namespace if given."""
        prefix = "/".join(p for p in (tenant, namespace if tenant else None) if p)
        names = sorted(self._read(self.topics.metadata))
        return [n for n in names if not prefix or n.startswith(prefix + "/")]

    def members(self) -> list[str]:
        """The live workers of the group (heard from within their TTL, not left), sorted."""
        now = int(time.time() * 1000)
        return sorted(m for m, r in self._read(self.topics.members).items() if _alive(r, now))

    def status(self, fqn: str) -> list[InstancePlacement]:
        """Each instance of ``fqn`` now assigned: its worker, whether it is alive, and
        what that worker published of the instance (its counters).

        Returns:
            the placements, by instance index.
        """
        assignments = self._read(self.topics.assignments)
        members = self._read(self.topics.members)
        workers = self._read(self.topics.status)
        now = int(time.time() * 1000)
        return [
            InstancePlacement(
                instance,
                worker,
                _alive(members.get(worker), now),
                _reported(workers.get(worker), instance),
            )
            for instance, worker in sorted(assignments.items(), key=lambda kv: _index(kv[0]))
            if instance.rpartition(":")[0] == fqn
        ]


def _reported(worker_status: Any, instance: str) -> dict[str, Any] | None:
    """What a worker's status entry says of ``instance`` (``None``: nothing)."""
    instances = worker_status.get("instances") if isinstance(worker_status, dict) else None
    reported = instances.get(instance) if isinstance(instances, dict) else None
    return dict(reported) if isinstance(reported, dict) else None


def _index(instance: str) -> tuple[str, int]:
    fqn, _, index = instance.rpartition(":")
    return fqn, int(index) if index.isdigit() else -1
