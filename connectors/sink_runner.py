"""``pulsar-state sink run --config sink.yaml``: the SQL sink on its own, without a worker.

Config (YAML or JSON)::

    serviceUrl: pulsar://127.0.0.1:6650
    topic: persistent://public/default/orders      # keyed records
    subscription: orders-sink                       # failover: one active runner
    database: /var/lib/orders.db                    # or postgresql://user:pass@host:5432/db
    table: orders
    name: orders-sink                               # for the metadata record
    adminUrl: http://127.0.0.1:8080                 # optional: protect metadataTopic
    metadataTopic: persistent://public/default/sink-metadata   # optional

Each record is written (effectively once, see :mod:`.sink`) before it is
acknowledged.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import click
import pulsar
import yaml

from pulsar_state.cli_options import client_logger
from pulsar_state.connectors.sink import SinkRecord, SqlUpsertSink, record_metadata
from pulsar_state.errors import ConfigurationError, PulsarStateError
from pulsar_state.position import Position
from pulsar_state.pulsar_map import PulsarMap

__all__ = ["run_sink", "sink"]

log = logging.getLogger(__name__)


def run_sink(config: dict[str, Any], *, max_idle_s: float | None = None) -> SqlUpsertSink:
    """Consume and write until interrupted (or idle for ``max_idle_s``)."""
    for key in ("serviceUrl", "topic", "subscription", "database"):
        if not config.get(key):
            raise ConfigurationError(f"sink config needs {key!r}")
    # the native logger: a Python one can abort the process at exit (see cli_options)
    client = pulsar.Client(config["serviceUrl"], logger=client_logger())
    sink = SqlUpsertSink()
    try:
        sink.open(config)
        if config.get("metadataTopic"):
            with PulsarMap[str, Any](
                client, config["metadataTopic"], admin_url=config.get("adminUrl")
            ) as records:
                version = record_metadata(
                    records,
                    config.get("name", config["subscription"]),
                    sink.metadata_config(config),
                    sink.schema,
                )
                log.info("sink config version %s", version)
        consumer = client.subscribe(
            config["topic"],
            config["subscription"],
            consumer_type=pulsar.ConsumerType.Failover,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        idle_since = time.monotonic()
        try:
            while True:
                try:
                    msg = consumer.receive(timeout_millis=500)
                except pulsar.Timeout:
                    if max_idle_s is not None and time.monotonic() - idle_since > max_idle_s:
                        return sink
                    continue
                idle_since = time.monotonic()
                record = SinkRecord(
                    topic=msg.topic_name(),
                    key=msg.partition_key() or None,
                    value=msg.data(),
                    position=Position.from_message_id(msg.message_id()),
                )
                try:
                    sink.write(record)
                except ValueError as exc:  # a record the sink cannot take: skip, count, log
                    log.warning("skipped a record: %s", exc)
                    sink.skipped += 1
                consumer.acknowledge(msg)
        finally:
            consumer.close()
    finally:
        sink.close()
        client.close()


@click.group()
def sink() -> None:
    """The SQL sink (SQLite or PostgreSQL) outside the functions runtime."""


@sink.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
)
@click.option(
    "--max-idle-s", type=float, default=None, help="Stop after this long without records."
)
def run(config_path: Path, max_idle_s: float | None) -> None:
    """Consume the topic and upsert its records into the table."""
    data = yaml.safe_load(config_path.read_text())
    if not isinstance(data, dict):
        raise click.ClickException(f"{config_path}: a sink config is a mapping")
    try:
        done = run_sink(data, max_idle_s=max_idle_s)
    except (PulsarStateError, ConfigurationError, pulsar.PulsarException) as exc:
        raise click.ClickException(str(exc)) from exc
    except KeyboardInterrupt:
        return
    click.echo(f"written {done.written}, skipped {done.skipped}")
