"""The functions part of ``pulsar-state demo``: packaged functions on the shared state.

Deploys the word-count stateful function, the function metadata manager and
the SQL sink from their config files with ``pulsar-admin``, drives a workload
through them, runs three scheduler members that assign the registered
functions' instances, and prints counters, records, table rows and assignments.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import click
import pulsar
import yaml

from pulsar_state.cli_options import client_logger
from pulsar_state.connectors.sink import open_backend
from pulsar_state.connectors.sql_backend import SinkDatabaseError
from pulsar_state.deploy.function_package import build_function_package
from pulsar_state.deploy.functions_deploy import FUNCTIONS, _config_dir, _entry
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.functions.scheduler_member import SchedulerMember
from pulsar_state.pulsar_map import PulsarMap

__all__ = ["functions_demo"]

LINES = [
    "the quick brown fox",
    "jumps over the lazy dog",
    "the dog sleeps",
    "a fox runs",
] * 5


def _deploy(
    admin: PulsarAdminCli, config_file: str, suffix: str, **extra: Any
) -> tuple[str, str, str]:
    entry, extras = FUNCTIONS[config_file]
    config = yaml.safe_load((_config_dir() / config_file).read_text())
    config["name"] = f"{config['name']}-{suffix}"
    config["inputs"] = [f"{config['inputs'][0]}-{suffix}"]
    if "output" in config:
        config["output"] = f"{config['output']}-{suffix}"
    config["userConfig"] = {**config.get("userConfig", {}), **extra}
    fqn = (config["tenant"], config["namespace"], config["name"])
    with tempfile.TemporaryDirectory() as tmp:
        rendered = Path(tmp) / config_file
        rendered.write_text(yaml.safe_dump(config))
        package = build_function_package(  # what `pulsar-state deploy` sends too
            name=config["name"], entry=_entry(entry), out_dir=Path(tmp), extras=extras
        )
        admin.create_function(fqn=fqn, config_file=rendered, py=package)
    return fqn


def _wait_running(admin: PulsarAdminCli, fqn: tuple[str, str, str], instances: int) -> None:
    deadline = time.monotonic() + 180
    while admin.function_status(fqn)["numRunning"] < instances:
        if time.monotonic() > deadline:
            raise click.ClickException(f"{'/'.join(fqn)} did not start")
        time.sleep(1)


def _sink_demo(client: pulsar.Client, topic: str, database: Path) -> None:
    """Keyed orders through the SQL sink: the table keeps the latest per key."""
    backend = open_backend(str(database))  # the sink's own reader of its table

    def table() -> dict[str, str]:
        try:
            return dict(sorted(backend.rows("kv").items()))
        except SinkDatabaseError:  # the sink has not created it yet
            return {}

    producer = client.create_producer(topic)
    expected: dict[str, str] = {}
    orders = [(f"order-{i % 4}", json.dumps({"qty": i})) for i in range(10)]
    with click.progressbar(orders, label="  sending keyed orders to the SQL sink") as bar:
        for key, value in bar:
            producer.send(value.encode(), partition_key=key)
            expected[key] = value
    producer.send(b"", partition_key="order-0")  # an empty value deletes the row
    del expected["order-0"]
    try:
        deadline = time.monotonic() + 120
        while table() != expected:
            if time.monotonic() > deadline:
                raise click.ClickException(f"the sink table is {table()}, not {expected}")
            time.sleep(0.5)
        click.echo(f"  table kv in {database} (effectively once, latest per key):")
        for key, value in table().items():
            click.echo(f"    {key:8} {value}")
    finally:
        backend.close()


def _show_assignments(members: list[SchedulerMember], instances: int) -> None:
    """Wait until ``instances`` are spread over ``members``; print who runs what."""
    deadline = time.monotonic() + 60
    while True:
        mine = {m.member_id: m.assignments() for m in members}
        if sum(map(len, mine.values())) == instances and all(mine.values()):
            break
        if time.monotonic() > deadline:
            raise click.ClickException("the scheduler did not assign every instance")
        time.sleep(0.3)
    for member_id, assigned in mine.items():
        click.echo(f"  {member_id}: {', '.join(assigned)}")


def functions_demo(service_url: str, admin_url: str, suffix: str) -> None:
    click.secho(
        "==> packaged functions on the shared state (deployed from deploy/functions/*.yaml)",
        bold=True,
    )
    admin = PulsarAdminCli(admin_url=admin_url)
    client = pulsar.Client(service_url, logger=client_logger())
    state_topic = f"persistent://public/default/wordcount-state-{suffix}"
    records_topic = f"persistent://public/default/function-metadata-{suffix}"
    deployed = []
    try:
        wc = _deploy(
            admin,
            "wordcount.yaml",
            suffix,
            stateTopic=state_topic,
            adminUrl=admin_url,
        )
        deployed.append(wc)
        fmm = _deploy(
            admin,
            "metadata-manager.yaml",
            suffix,
            metadataTopic=records_topic,
            adminUrl=admin_url,
        )
        deployed.append(fmm)
        database = Path(tempfile.gettempdir()) / f"pulsar-state-demo-{suffix}.db"
        sink = _deploy(
            admin,
            "sql-sink.yaml",
            suffix,
            database=str(database),
            metadataTopic=f"persistent://public/default/sql-sink-metadata-{suffix}",
            adminUrl=admin_url,
        )
        deployed.append(sink)
        _wait_running(admin, wc, 2)
        _wait_running(admin, fmm, 1)
        _wait_running(admin, sink, 1)
        click.echo(f"  running: {'/'.join(wc)} (2 instances), {'/'.join(fmm)}, {'/'.join(sink)}")

        producer = client.create_producer(f"persistent://public/default/wordcount-in-{suffix}")
        with click.progressbar(LINES, label="  sending lines to the word count") as bar:
            for line in bar:
                producer.send(line.encode())
        expected = Counter(w for line in LINES for w in line.split())
        with PulsarMap[str, Any](client, state_topic, admin_url=admin_url) as counts:
            deadline = time.monotonic() + 120
            while counts.get("counter/the", latest=True).result() != expected["the"]:
                if time.monotonic() > deadline:
                    raise click.ClickException("the word count did not catch up")
                time.sleep(0.5)
            got = {
                k.removeprefix("counter/"): v
                for k, v in counts.items().result().items()
                if k.startswith("counter/")
            }
        top = ", ".join(f"{w}={n}" for w, n in sorted(got.items(), key=lambda x: -x[1])[:6])
        click.echo(f"  counters (effectively once): {top}  exact={got == dict(expected)}")

        requests = client.create_producer(
            f"persistent://public/default/function-metadata-requests-{suffix}"
        )
        answers = client.subscribe(
            f"persistent://public/default/function-metadata-answers-{suffix}",
            "demo",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        spec = {"className": "etl.Enrich", "inputs": ["persistent://public/default/raw"]}
        for request in (
            {"op": "create", "fqn": "acme/prod/enrich", "config": {**spec, "parallelism": 3}},
            {"op": "create", "fqn": "acme/prod/audit", "config": spec},
            {
                "op": "update",
                "fqn": "acme/prod/enrich",
                "config": {**spec, "parallelism": 4},
                "expectedVersion": 0,
            },
            {"op": "update", "fqn": "acme/prod/enrich", "config": spec, "expectedVersion": 0},
        ):
            requests.send(json.dumps(request).encode())
            answer = json.loads(answers.receive(timeout_millis=60_000).data())
            verdict = (
                f"version {answer['version']}" if answer["ok"] else f"refused: {answer['error']}"
            )
            click.echo(f"  metadata {request['op']:6} {request['fqn']}: {verdict}")

        _sink_demo(client, f"persistent://public/default/sql-sink-input-{suffix}", database)

        assign_topic = f"persistent://public/default/function-assignments-{suffix}"
        scheduler = _deploy(
            admin,
            "scheduler.yaml",
            suffix,
            metadataTopic=records_topic,
            assignmentTopic=assign_topic,
            membersTopic=f"persistent://public/default/function-members-{suffix}",
            memberTtlSeconds=5,
            adminUrl=admin_url,
        )
        deployed.append(scheduler)
        _wait_running(admin, scheduler, 2)
        heartbeats = f"persistent://public/default/function-heartbeats-{suffix}"
        click.echo(
            f"  running: {'/'.join(scheduler)} (2 instances); 3 workers heartbeat to it, "
            "it schedules the metadata manager's records"
        )
        members = [
            SchedulerMember(
                client,
                member_id=f"worker-{i}",
                heartbeat_topic=heartbeats,
                assignment_topic=assign_topic,
                interval_s=1.0,
            )
            for i in range(3)
        ]
        try:
            _show_assignments(members, 5)
            click.echo("  worker-2 leaves:")
            members.pop().close()
            _show_assignments(members, 5)
        finally:
            for m in members:
                m.close()
    finally:
        for fqn in deployed:
            admin.delete_function(fqn)
        client.close()
