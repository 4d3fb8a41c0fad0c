"""The SQL sink on its own, without a worker (``pulsar-state sink run --config sink.yaml``).

Config (YAML or JSON)::

    serviceUrl: pulsar://127.0.0.1:6650
    topic: persistent://public/default/orders      # keyed records
    subscription: orders-sink
    database: /var/lib/orders.db                    # or postgresql://user:pass@host:5432/db
    table: orders
    name: orders-sink                               # the group and the metadata record
    adminUrl: http://127.0.0.1:8080                 # needed by the group and metadataTopic
    metadataTopic: persistent://public/default/sink-metadata   # optional
    deadLetterTopic: persistent://public/default/orders-dlq    # optional, for poison records
    # optional: records a transaction (see .sink_batches), and fields to columns
    batchMaxRecords: 500
    batchMaxBytes: 1048576
    batchMaxDelayMs: 100
    columns: {customer: customer.name, total: total}   # see .sink_columns; or
                                                    # columns: schema (.sink_schema)
    columnTypes: {total: NUMERIC(12, 2)}
    # optional: authentication and TLS, as client.conf spells them (for the broker
    # and the admin API; the command line's --auth-*/--tls-* options win)
    tlsTrustCertsFilePath: /etc/pulsar/ca.pem
    tlsAllowInsecureConnection: false
    authPlugin: tls                                 # or token, basic, a class name
    authParams: tlsCertFile:/etc/pulsar/client.pem,tlsKeyFile:/etc/pulsar/client.key
    # optional: a group of runners sharing the partitions (see .sink_group)
    assignmentTopic: persistent://public/default/orders-sink-assignments
    memberId: host-a                                # default <hostname>-<pid>
    sessionTimeoutS: 10                             # a dead runner's partitions move after this

Without ``assignmentTopic`` the runner subscribes to the whole topic with a
failover subscription (one active runner per partition, chosen by the broker).
With it, runners of the same ``name`` form a group whose leader assigns the
input's partitions to them (:mod:`.sink_group`); each consumes only its own.

Records are received in batches (:mod:`.sink_batches`: up to
``batchMaxRecords``, ``batchMaxBytes``, ``batchMaxDelayMs``), each written in
one transaction (effectively once, see :mod:`.sink` and
:mod:`.sink_batch_write`) before its records are acknowledged
(:mod:`.sink_records`). A write the database refuses for a while (unreachable,
connection lost, locked: a *retriable* error) is tried again in place, with a
backoff from 0.5 s doubling to 30 s, until it succeeds or the runner is
stopped; no later record goes first. A record whose data a statement refuses
is found by splitting the batch and dead-lettered. Any other database error
stops the runner (nothing of the batch acked; a restart resumes there). A
record the takeover-gap check refuses (:class:`~.sink.TakeoverGapError`: the
position was stored by another runner and records between it and this one are
still to come) is held, not
acknowledged, with the later records of its partition; the consumer is asked
to rewind, so the missing records come first (:class:`_Records`). A record
that can never be written (no key, not UTF-8) goes to ``deadLetterTopic`` or
is logged and skipped, counted either way (:mod:`.dead_letter`). SIGINT and
SIGTERM stop the runner cleanly (in a group, its partitions move at once).

The command (:mod:`pulsar_state.cli.sink`) takes the same ``--auth-*`` and
``--tls-*`` options as the other ``pulsar-state`` commands, for the broker and
the admin API; set on the command line they win over the config's keys above
(:func:`runner_auth`), which otherwise apply to every call of the runner. The
database password comes from the ``PULSAR_STATE_DATABASE_PASSWORD`` environment
variable rather than the config file (:func:`~.sql_backend.database_password`).
``--metrics-port`` serves Prometheus metrics and ``/healthz`` (:mod:`.sink_health`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

import pulsar

from pulsar_state.client_log import client_logger
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.connectors.dead_letter import DeadLetters, read_key
from pulsar_state.connectors.sink import SinkRecord, SqlUpsertSink, record_metadata
from pulsar_state.connectors.sink_batches import BatchLimits, collect
from pulsar_state.connectors.sink_group import LOCAL_KEYS, GroupSettings, SinkGroup
from pulsar_state.connectors.sink_health import SINK_RECORDS, SinkHealth
from pulsar_state.connectors.sink_records import Records as _Records
from pulsar_state.errors import ConfigurationError
from pulsar_state.map.pulsar_map import PulsarMap
from pulsar_state.position import Position
from pulsar_state.runtime.tls import admin_tls
from pulsar_state.scheduling.in_order import batch_size

__all__ = ["AUTH_PARAMS", "AUTH_PLUGIN", "run_sink", "runner_auth"]

#: the config keys of the runner's authentication (as ``client.conf`` spells them)
AUTH_PLUGIN = "authPlugin"
AUTH_PARAMS = "authParams"

log = logging.getLogger(__name__)


class _Source(Protocol):
    def receive(self, timeout_ms: int) -> tuple[pulsar.Message, pulsar.Consumer] | None: ...

    def close(self) -> None: ...


class _FailoverSource:
    """The single runner: the whole topic, a failover subscription."""

    def __init__(self, client: pulsar.Client, topic: str, subscription: str) -> None:
        self._consumer = client.subscribe(
            topic,
            subscription,
            consumer_type=pulsar.ConsumerType.Failover,
            initial_position=pulsar.InitialPosition.Earliest,
        )

    def receive(self, timeout_ms: int) -> tuple[pulsar.Message, pulsar.Consumer] | None:
        try:
            return self._consumer.receive(timeout_millis=timeout_ms), self._consumer
        except pulsar.Timeout:
            return None

    def connected(self) -> bool:
        return bool(self._consumer.is_connected())

    def close(self) -> None:
        self._consumer.close()


def runner_auth(config: Mapping[str, Any], flags: ClusterAuth | None = None) -> ClusterAuth:
    """The runner's authentication and TLS trust: the command line's (``flags``) where
    it sets them, else the config's, spelled as ``client.conf`` spells them:
    ``authPlugin`` / ``authParams``, ``tlsTrustCertsFilePath``,
    ``tlsAllowInsecureConnection`` (either one turns the check off).

    Raises:
        ConfigurationError: a bad config setting (a trust file that is not a file, a
            flag that is not a boolean, an unknown plugin).
    """
    flags = flags or ClusterAuth()
    tls = admin_tls(config.get)
    plugin, params = config.get(AUTH_PLUGIN) or None, config.get(AUTH_PARAMS) or None
    for key, value in ((AUTH_PLUGIN, plugin), (AUTH_PARAMS, params)):
        if value is not None and not isinstance(value, str):
            raise ConfigurationError(f"sink config {key!r} must be a string, got {value!r}")
    merged = flags
    if flags.kind is None and plugin is not None:
        merged = dataclasses.replace(merged, auth_plugin=plugin, auth_params=params)
    if flags.tls_trust_cert_path is None and tls.trust_cert_path is not None:
        merged = dataclasses.replace(merged, tls_trust_cert_path=tls.trust_cert_path)
    if tls.allow_insecure and not flags.tls_allow_insecure:
        merged = dataclasses.replace(merged, tls_allow_insecure=True)
    return merged


def run_sink(
    config: dict[str, Any],
    *,
    max_idle_s: float | None = None,
    stop: threading.Event | None = None,
    auth: ClusterAuth | None = None,
    health: SinkHealth | None = None,
) -> SqlUpsertSink:
    """Consume and write until ``stop`` is set, interrupted or idle for ``max_idle_s``.

    ``auth``: the broker's and admin API's authentication and TLS trust (the
    command line's); the config's own settings fill in what it leaves unset
    (:func:`runner_auth`) and reach every call: the client, the metadata map, the
    group's store and map, the position check.
    ``health``: told when the runner consumes and when writes fail.
    """
    for key in ("serviceUrl", "topic", "subscription", "database"):
        if not config.get(key):
            raise ConfigurationError(f"sink config needs {key!r}")
    auth = runner_auth(config, auth)
    admin_url = config.get("adminUrl") or None
    admin = auth.admin_endpoint(admin_url) if admin_url else None
    group = GroupSettings.from_config(config)  # validated before connecting
    limits = BatchLimits.from_config(config)
    if group is not None:
        group = dataclasses.replace(group, admin=auth.admin_endpoint(group.admin_url))
    stop = stop or threading.Event()
    health = health or SinkHealth()
    # the native logger: a Python one can abort the process at exit (see client_log)
    client = pulsar.Client(config["serviceUrl"], logger=client_logger(), **auth.client_kwargs())
    sink = SqlUpsertSink()
    dead_letters = DeadLetters(client, config.get("deadLetterTopic"))
    try:
        sink.open(config, admin=admin)
        if config.get("metadataTopic"):
            shared = {k: v for k, v in config.items() if k not in LOCAL_KEYS}
            with PulsarMap[str, Any](
                client,
                config["metadataTopic"],
                admin=admin,
            ) as records:
                version = record_metadata(
                    records,
                    config.get("name", config["subscription"]),
                    sink.metadata_config(shared),
                    sink.schema,
                )
                log.info("sink config version %s", version)
        source: _Source
        if group is None:
            source = _FailoverSource(client, config["topic"], config["subscription"])
        else:
            source = SinkGroup(
                client, group, topic=config["topic"], subscription=config["subscription"]
            ).start()
        health.consuming(getattr(source, "connected", lambda: True))
        handler = _Records(sink, dead_letters, stop=stop, health=health)
        idle_since = time.monotonic()
        try:
            while not stop.is_set():
                got = collect(source.receive, lambda m: len(m[0].data()), limits, stop=stop)
                if not got:
                    if max_idle_s is not None and time.monotonic() - idle_since > max_idle_s:
                        return sink
                    continue
                idle_since = time.monotonic()
                outcomes = handler.handle_batch(
                    [(_record(m), c.redeliver_unacknowledged_messages) for m, c in got]
                )
                for (msg, consumer), outcome in zip(got, outcomes, strict=True):
                    if outcome != "held":  # a held record comes back when the consumer rewinds
                        _acknowledge(consumer, msg)
                    SINK_RECORDS.labels(outcome).inc()
            return sink
        finally:
            health.consuming(None)
            handler.close()
            source.close()
    finally:
        dead_letters.close()
        sink.close()
        client.close()


def _record(msg: pulsar.Message) -> SinkRecord:
    return SinkRecord(
        topic=msg.topic_name(),
        key=read_key(msg.partition_key),
        value=msg.data(),
        position=Position.from_message_id(msg.message_id()),
        properties=dict(msg.properties() or {}),
        batch_size=batch_size(msg.message_id()),
    )


def _acknowledge(consumer: pulsar.Consumer, msg: pulsar.Message) -> None:
    """Acknowledge a committed record; a consumer closed meanwhile (a group runner gave
    the partition away while the batch was written) leaves it to the next owner, which
    skips it as a redelivery."""
    try:
        consumer.acknowledge(msg)
    except pulsar.PulsarException as exc:
        log.info("could not acknowledge %s (the next owner skips it): %s", msg.message_id(), exc)
