"""One blocking client interface over every system the peer benchmark compares.

Each workload drives a :class:`Peer`; each peer is used the way its users
usually use it from Python:

- ``pulsar-map``: :class:`pulsar_state.PulsarMap` (bytes values) with the default
  :class:`~pulsar_state.StateConfig` (``access_mode="adaptive"``); increments with
  ``update`` (the writer re-runs the function on the latest state);
  ``pulsar-map-wait`` is the same with ``StateConfig(access_mode="wait")``:
  writers queue for the topic (``WaitForExclusive``) instead of taking it over;
- ``pulsar-meta``: :class:`pulsar_state.MetadataStore`; increments by versioned
  compare-and-set (``get(latest=True)`` then ``put(expected_version=...)``);
- ``etcd-etcd3``: the synchronous gRPC client ``etcd3`` (0.12); its generated
  protobuf modules predate protobuf 4 and import only with the pure-Python
  protobuf runtime, so its process runs with
  ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`` (:data:`CHILD_ENV`; set
  before the interpreter starts, never in a process that has imported
  protobuf already);
- ``etcd-aetcd``: the asyncio gRPC client ``aetcd``, driven by a private event
  loop (``run_until_complete``: no thread hop), with the default (C) protobuf
  runtime;
- both etcd clients: linearizable ``get`` (etcd's default); increments by a
  transaction comparing the key's ``mod_revision``;
- ``zookeeper``: ``kazoo``; a linearizable read is ``sync`` then ``get``;
  increments by ``set(version=...)``;
- ``pulsar-raw``: a plain producer on the same broker (puts only): the ceiling.

Peers are created inside the process that uses them (workers pickle only a
:class:`PeerSpec`); a client that cannot be imported raises
:class:`PeerSetupError` with what to install.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pulsar

from pulsar_state import BadVersionError, BytesSerde, MetadataStore, PulsarMap, StateConfig
from pulsar_state.topic_names import full_topic_name

PEERS = (
    "pulsar-map",
    "pulsar-map-wait",
    "pulsar-meta",
    "etcd-etcd3",
    "etcd-aetcd",
    "zookeeper",
    "pulsar-raw",
)
#: the Pulsar-based systems (measured on each broker the bench runs)
PULSAR_SYSTEMS = frozenset({"pulsar-map", "pulsar-map-wait", "pulsar-meta", "pulsar-raw"})
#: environment a system's process must start with (set before any protobuf import)
CHILD_ENV: dict[str, dict[str, str]] = {
    "etcd-etcd3": {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"},
}
#: the Python module each peer's client comes from, and where it is declared
CLIENT_MODULES = {"etcd-etcd3": "etcd3", "etcd-aetcd": "aetcd", "zookeeper": "kazoo"}


class PeerSetupError(RuntimeError):
    """A peer's client or server cannot be used here; the message says what to do."""


def import_client(system: str) -> Any:
    """Import ``system``'s client module or raise :class:`PeerSetupError`."""
    module = CLIENT_MODULES[system]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise PeerSetupError(
            f"{system}: the Python client {module!r} is not installed ({exc}); "
            "install the bench extra: .venv/bin/pip install -e '.[bench]' (make bench does)"
        ) from exc
    except TypeError as exc:  # protobuf >= 4 refusing old generated modules
        raise PeerSetupError(
            f"{system}: {module!r} cannot load its protobuf modules ({exc}); its process "
            f"needs {CHILD_ENV.get(system, {})} in the environment before it starts"
        ) from exc


@dataclass(frozen=True)
class PeerSpec:
    """What a process needs to open a peer: picklable."""

    name: str
    namespace: str  # a topic name, a key prefix or a znode root, unique per round
    service_url: str = ""
    admin_url: str = ""
    etcd_port: int = 0
    zookeeper_port: int = 0

    def open(self) -> Peer:
        openers: dict[str, Callable[[PeerSpec], Peer]] = {
            "pulsar-map": OursMap,
            "pulsar-map-wait": OursMap,
            "pulsar-meta": OursMeta,
            "etcd-etcd3": Etcd3,
            "etcd-aetcd": Etcd,
            "zookeeper": ZooKeeper,
            "pulsar-raw": RawPulsar,
        }
        return openers[self.name](self)


class Peer(Protocol):
    def put(self, key: str, value: bytes) -> None: ...

    def read_latest(self, key: str) -> bytes | None: ...

    def increment(self, key: str) -> int:
        """Add one to the integer under ``key``; returns the number of retries."""
        ...

    def close(self) -> None: ...


def _client(spec: PeerSpec) -> pulsar.Client:
    return pulsar.Client(
        spec.service_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def state_topic(namespace: str) -> str:
    """The state topic of a Pulsar peer opened on ``namespace`` (its :class:`PeerSpec`'s).

    Returns:
        Its full name.
    """
    return full_topic_name(f"bench-peers-{namespace}")


def _topic(spec: PeerSpec) -> str:
    return state_topic(spec.namespace)


def _plus_one(value: bytes | None) -> bytes:
    return str(int(value or b"0") + 1).encode()


class OursMap:
    def __init__(self, spec: PeerSpec) -> None:
        self._client = _client(spec)
        config = StateConfig(access_mode="wait") if spec.name.endswith("-wait") else StateConfig()
        self.map: PulsarMap[str, bytes] = PulsarMap(
            self._client,
            _topic(spec),
            admin_url=spec.admin_url,
            value_serde=BytesSerde(),
            config=config,
        )

    def put(self, key: str, value: bytes) -> None:
        self.map.put(key, value).result()

    def read_latest(self, key: str) -> bytes | None:
        return self.map.get(key, latest=True).result()

    def increment(self, key: str) -> int:
        self.map.update(key, _plus_one).result()
        return 0  # the writer retries inside; counted by its metrics, not here

    def close(self) -> None:
        self.map.close()
        self._client.close()


class OursMeta:
    def __init__(self, spec: PeerSpec) -> None:
        self._client = _client(spec)
        self.store = MetadataStore(self._client, _topic(spec), admin_url=spec.admin_url)

    def put(self, key: str, value: bytes) -> None:
        self.store.put(f"/{key}", value).result()

    def read_latest(self, key: str) -> bytes | None:
        got = self.store.get(f"/{key}", latest=True).result()
        return None if got is None else got.value

    def increment(self, key: str) -> int:
        retries = 0
        while True:
            got = self.store.get(f"/{key}", latest=True).result()
            version = -1 if got is None else got.stat.version
            try:
                self.store.put(
                    f"/{key}", _plus_one(None if got is None else got.value), version
                ).result()
                return retries
            except BadVersionError:
                retries += 1

    def close(self) -> None:
        self.store.close()
        self._client.close()


class Etcd3:
    """etcd through the synchronous ``etcd3`` client (one gRPC channel, blocking stubs)."""

    def __init__(self, spec: PeerSpec) -> None:
        etcd3 = import_client(spec.name)
        self._prefix = f"/bench/{spec.namespace}/"
        self._etcd = etcd3.client(host="127.0.0.1", port=spec.etcd_port, timeout=30)

    def put(self, key: str, value: bytes) -> None:
        self._etcd.put(self._prefix + key, value)

    def read_latest(self, key: str) -> bytes | None:
        value, _ = self._etcd.get(self._prefix + key)  # linearizable unless serializable=True
        return None if value is None else bytes(value)

    def increment(self, key: str) -> int:
        full = self._prefix + key
        tx = self._etcd.transactions
        retries = 0
        while True:
            value, meta = self._etcd.get(full)
            revision = 0 if meta is None else meta.mod_revision
            ok, _ = self._etcd.transaction(
                compare=[tx.mod(full) == revision],
                success=[tx.put(full, _plus_one(value))],
                failure=[],
            )
            if ok:
                return retries
            retries += 1

    def close(self) -> None:
        self._etcd.close()


class Etcd:
    """etcd through the asyncio ``aetcd`` client on a private event loop."""

    def __init__(self, spec: PeerSpec) -> None:
        aetcd = import_client(spec.name)

        self._prefix = f"/bench/{spec.namespace}/"
        self._loop = asyncio.new_event_loop()
        self._etcd = aetcd.Client(host="127.0.0.1", port=spec.etcd_port, timeout=30)
        self._run(self._etcd.connect())

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def put(self, key: str, value: bytes) -> None:
        self._run(self._etcd.put((self._prefix + key).encode(), value))

    def read_latest(self, key: str) -> bytes | None:
        got = self._run(self._etcd.get((self._prefix + key).encode()))
        return None if got is None else bytes(got.value)

    async def _increment(self, key: bytes) -> int:
        tx = self._etcd.transactions
        retries = 0
        while True:
            got = await self._etcd.get(key)
            value, revision = (None, 0) if got is None else (got.value, got.mod_revision)
            ok, _ = await self._etcd.transaction(
                compare=[tx.mod(key) == revision],
                success=[tx.put(key, _plus_one(value))],
                failure=[],
            )
            if ok:
                return retries
            retries += 1

    def increment(self, key: str) -> int:
        retries: int = self._run(self._increment((self._prefix + key).encode()))
        return retries

    def close(self) -> None:
        self._run(self._etcd.close())
        self._loop.close()


class ZooKeeper:
    def __init__(self, spec: PeerSpec) -> None:
        import_client(spec.name)
        from kazoo.client import KazooClient  # type: ignore[import-untyped]  # noqa: PLC0415

        self._root = f"/bench/{spec.namespace}"
        self._zk = KazooClient(
            hosts=f"127.0.0.1:{spec.zookeeper_port}",
            timeout=30,
            logger=logging.getLogger("kazoo.bench"),
        )
        self._zk.start(timeout=30)
        self._zk.ensure_path(self._root)

    def put(self, key: str, value: bytes) -> None:
        from kazoo.exceptions import NoNodeError  # type: ignore[import-untyped]  # noqa: PLC0415

        path = f"{self._root}/{key}"
        try:
            self._zk.set(path, value)
        except NoNodeError:
            self._zk.create(path, value)

    def read_latest(self, key: str) -> bytes | None:
        from kazoo.exceptions import NoNodeError  # noqa: PLC0415

        path = f"{self._root}/{key}"
        self._zk.sync(path)
        try:
            data: bytes = self._zk.get(path)[0]
            return data
        except NoNodeError:
            return None

    def increment(self, key: str) -> int:
        from kazoo.exceptions import BadVersionError as ZkBadVersion  # noqa: PLC0415
        from kazoo.exceptions import NodeExistsError, NoNodeError  # noqa: PLC0415

        path = f"{self._root}/{key}"
        retries = 0
        while True:
            try:
                value, stat = self._zk.get(path)
                self._zk.set(path, _plus_one(value), version=stat.version)
                return retries
            except NoNodeError:
                try:
                    self._zk.create(path, b"1")
                    return retries
                except NodeExistsError:
                    pass
            except ZkBadVersion:
                pass
            retries += 1

    def close(self) -> None:
        self._zk.stop()
        self._zk.close()


class RawPulsar:
    def __init__(self, spec: PeerSpec) -> None:
        self._client = _client(spec)
        self._producer = self._client.create_producer(_topic(spec), batching_enabled=False)

    def put(self, key: str, value: bytes) -> None:
        self._producer.send(value, partition_key=key)

    def read_latest(self, key: str) -> bytes | None:
        raise NotImplementedError("a raw producer has no reads; it is the put ceiling only")

    def increment(self, key: str) -> int:
        raise NotImplementedError("a raw producer cannot compare-and-set")

    def close(self) -> None:
        self._producer.close()
        self._client.close()
