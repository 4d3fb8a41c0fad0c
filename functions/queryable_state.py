"""Queryable state (PIP-15): a function's state key read from outside, as Pulsar answers it.

Pulsar's ``GET /admin/v3/functions/{tenant}/{namespace}/{function}/state/{key}``
answers a ``FunctionState``: ``key``, then ``stringValue`` (a value that is
UTF-8), ``byteValue`` (any other value, base64 as Jackson writes a ``byte[]``)
or ``numberValue`` (a counter), and ``version``; absent fields are left out.
A missing key is a 404 whose reason is ``key '<key>' doesn't exist.``.

:class:`FunctionStateReader` answers the same question from this project's
state: it finds the function's state topic without the caller knowing the
layout (the function's ``userConfig.stateTopic`` from the admin API, else the
stateful kit's default ``<name>-pss-state``; a deleted function's state stays
readable under the default, and so does a function's on brokers without
Pulsar's functions worker); a function Pulsar's admin API does not know is
looked up in the records of the groups of ``pulsar-state worker`` named by
``metadata_topics`` (its ``config.userConfig.stateTopic``), so a function
run by ``pulsar-state worker`` with a state topic of its own is found. It keeps a read-only
:class:`~pulsar_state.core.log.view.TopicView` per state topic (no producer, no
subscription, no admin write) and reads each key after catching up with the
topic, so an answer is never older than the query. Key ``K`` is the kit's
``counter/K`` if there is one, else ``state/K``.

``version`` is where the key's value was last written in the state topic:
``ledger id * 2**32 + entry id`` of that write (the same for every reader,
compacted or not; it grows with every change of the key).
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import pulsar

from pulsar_state.cluster.endpoint import AdminEndpoint, resolve_admin
from pulsar_state.core.log.replay import AppliedWrite
from pulsar_state.core.log.view import TopicView
from pulsar_state.errors import (
    ConfigurationError,
    NotFoundError,
    PermissionDeniedError,
    StateTopicError,
    TopicNotFoundError,
)
from pulsar_state.map.op import MapCodec, MapOp, apply_map_op
from pulsar_state.position import Position
from pulsar_state.serde import JsonSerde, StrKeySerde
from pulsar_state.topic_names import function_state_topic

__all__ = [
    "FunctionNotFoundError",
    "FunctionStateReader",
    "default_state_topic",
    "function_state",
    "version_of",
]

log = logging.getLogger(__name__)


class FunctionNotFoundError(NotFoundError):
    """No such function (tenant, namespace or name), and no state left by one."""


def default_state_topic(tenant: str, namespace: str, name: str) -> str:
    """The stateful kit's state topic when ``stateTopic`` is not configured."""
    return function_state_topic(tenant, namespace, name)


def version_of(position: Position) -> int:
    """A key's ``version``: its last write's ledger and entry as one Java ``long``."""
    return ((position.ledger & 0x7FFFFFFF) << 32) | (position.entry & 0xFFFFFFFF)


def function_state(key: str, entries: Mapping[str, Any], *, version: int) -> dict[str, Any]:
    """Pulsar's ``FunctionState`` JSON for ``key`` of a kit's state; NotFoundError if absent."""
    counter = entries.get(f"counter/{key}")
    if counter is not None:
        return {"key": key, "numberValue": int(counter), "version": version}
    stored = entries.get(f"state/{key}")
    if not isinstance(stored, dict) or not ({"s", "b"} & stored.keys()):
        raise NotFoundError(f"key '{key}' doesn't exist.")
    if "s" in stored:
        return {"key": key, "stringValue": str(stored["s"]), "version": version}
    raw = base64.b64decode(stored["b"])
    try:
        return {"key": key, "stringValue": raw.decode("utf-8"), "version": version}
    except UnicodeDecodeError:
        return {"key": key, "byteValue": stored["b"], "version": version}


def _state_topic_of(config: Any) -> str | None:
    """A worker record's ``userConfig.stateTopic`` (``None``: not set)."""
    user_config = config.get("userConfig") if isinstance(config, dict) else None
    topic = user_config.get("stateTopic") if isinstance(user_config, dict) else None
    return str(topic) if isinstance(topic, str) and topic else None


class _StateTopic:
    """One state topic's read-only view and the version of each of its keys."""

    def __init__(self, view: TopicView[dict[str, Any], MapOp[str, Any]]) -> None:
        self.view = view
        self.lock = threading.Lock()
        self.versions: dict[str, int] = {}
        view.add_listener(self._applied)

    def _applied(self, write: AppliedWrite[MapOp[str, Any]]) -> None:
        version = version_of(write.position)
        for op in write.ops:
            if op.is_delete:
                self.versions.pop(op.key, None)
            else:
                self.versions[op.key] = version

    def read(self, key: str) -> dict[str, Any]:
        with self.lock:
            entries = self.view.catch_up()
            shown = f"counter/{key}" if f"counter/{key}" in entries else f"state/{key}"
            return function_state(key, entries, version=self.versions.get(shown, 0))


class FunctionStateReader:
    """Reads functions' state keys by function name. Thread-safe; close() when done."""

    def __init__(
        self,
        *,
        client: pulsar.Client,
        admin_url: str | None = None,
        admin: AdminEndpoint | None = None,
        timeout_s: float = 30.0,
        metadata_topics: Sequence[str] = (),
    ) -> None:
        """``admin``: the admin API with its credentials and TLS trust (an
        :class:`~pulsar_state.cluster.endpoint.AdminEndpoint`), or ``admin_url``, a bare
        URL; one of them is required. Used for its own calls and its views'.
        ``metadata_topics``: the records topics (``<group>-metadata``) of groups of
        ``pulsar-state worker`` whose functions to find, read as the state topics are."""
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        endpoint = resolve_admin(admin_url, admin)
        if endpoint is None:
            raise ConfigurationError("admin_url or admin (an AdminEndpoint) is required")
        self._client = client
        self._endpoint = endpoint
        self._timeout_s = timeout_s
        self._admin = endpoint.admin(timeout_s=min(10.0, timeout_s), retry_s=timeout_s)
        self._lock = threading.Lock()
        self._topics: dict[str, _StateTopic] = {}
        self._metadata_topics = tuple(metadata_topics)

    def state_topic(self, tenant: str, namespace: str, name: str) -> tuple[str, bool]:
        """The function's state topic, and whether the function is registered."""
        for part, what in ((tenant, "tenant"), (namespace, "namespace"), (name, "function")):
            if not isinstance(part, str) or not part or "/" in part:
                raise ValueError(f"a {what} name is a non-empty name without '/', got {part!r}")
        path = "/".join(quote(p, safe="") for p in (tenant, namespace, name))
        resp = self._admin.request("GET", f"/admin/v3/functions/{path}")
        # 409: the broker runs no functions worker ("Pulsar Function Worker is not
        # enabled"), as on a cluster whose functions run on pulsar-state worker:
        # no function is registered there, its state is under the default topic
        if resp.status_code in (404, 409):
            recorded = self._worker_record(f"{tenant}/{namespace}/{name}")
            if recorded is not None:
                topic = _state_topic_of(recorded.get("config"))
                return topic or default_state_topic(tenant, namespace, name), True
            return default_state_topic(tenant, namespace, name), False
        if resp.status_code in (401, 403):
            raise PermissionDeniedError(
                f"not permitted to read function {tenant}/{namespace}/{name} "
                f"({resp.status_code}): the role needs the functions permission"
            )
        if resp.status_code != 200:
            raise StateTopicError(
                f"looking up function {tenant}/{namespace}/{name} failed "
                f"({resp.status_code}: {resp.text[:300]})"
            )
        user_config = (resp.json() or {}).get("userConfig") or {}
        topic = user_config.get("stateTopic") if isinstance(user_config, dict) else None
        return (str(topic) if topic else default_state_topic(tenant, namespace, name)), True

    def _worker_record(self, fqn: str) -> dict[str, Any] | None:
        """The record of ``fqn`` in the first group of workers that has one (caught up
        with its metadata topic now); ``None``: no group records it."""
        for topic in self._metadata_topics:
            try:
                records = self._open(topic)
            except TopicNotFoundError:  # no such group (yet)
                continue
            try:
                with records.lock:
                    record = records.view.catch_up().get(fqn)
            except StateTopicError:  # e.g. the topic was deleted: open it afresh next time
                self._drop(topic, records)
                raise
            if isinstance(record, dict):
                return record
        return None

    def query(self, tenant: str, namespace: str, name: str, key: str) -> dict[str, Any]:
        """The key's ``FunctionState`` JSON; NotFoundError for a missing key,
        FunctionNotFoundError for a missing function."""
        if not isinstance(key, str) or not key:
            raise ValueError("a state key is a non-empty string")
        topic, registered = self.state_topic(tenant, namespace, name)
        try:
            state = self._open(topic)
        except TopicNotFoundError:
            if registered:  # deployed, nothing written yet
                raise NotFoundError(f"key '{key}' doesn't exist.") from None
            raise FunctionNotFoundError(f"Function {name} doesn't exist") from None
        try:
            return state.read(key)
        except StateTopicError:  # e.g. the topic was deleted: open it afresh next time
            self._drop(topic, state)
            raise

    def _open(self, topic: str) -> _StateTopic:
        with self._lock:
            state = self._topics.get(topic)
            if state is None:
                view: TopicView[dict[str, Any], MapOp[str, Any]] = TopicView(
                    client=self._client,
                    topic=topic,
                    codec=MapCodec(StrKeySerde(), JsonSerde()),
                    initializer=dict,
                    applier=apply_map_op,
                    admin=self._endpoint,
                    timeout_s=self._timeout_s,
                )
                state = self._topics[topic] = _StateTopic(view)
            return state

    def _drop(self, topic: str, state: _StateTopic) -> None:
        with self._lock:
            if self._topics.get(topic) is state:
                del self._topics[topic]
        state.view.close()

    def close(self) -> None:
        with self._lock:
            topics, self._topics = list(self._topics.values()), {}
        for state in topics:
            state.view.close()
        self._admin.close()
