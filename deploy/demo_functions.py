"""The functions part of ``pulsar-state demo``: packaged functions on the shared state.

Deploys the word-count stateful function, the function metadata manager and
the SQL sink from their config files through the admin REST API, drives a workload
through them and prints counters, records and table rows, then deletes them.
(The demo's next step runs the word count on ``pulsar-state worker``
processes: :mod:`.demo_workers`.)
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pulsar
import yaml

from pulsar_state.client_log import client_logger
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.connectors.sink import open_backend
from pulsar_state.connectors.sql_backend import SinkDatabaseError
from pulsar_state.deploy.function_package import build_function_package
from pulsar_state.deploy.function_ready import DeployedFunction
from pulsar_state.deploy.functions_deploy import FUNCTIONS, _config_dir, _entry
from pulsar_state.deploy.narration import say, step
from pulsar_state.deploy.rest_admin import PulsarAdminRest
from pulsar_state.errors import PulsarStateError
from pulsar_state.map.pulsar_map import PulsarMap
from pulsar_state.runtime.secrets import ADMIN_TOKEN_SECRET
from pulsar_state.topic_names import full_topic_name

__all__ = ["functions_demo"]

LINES = [
    "the quick brown fox",
    "jumps over the lazy dog",
    "the dog sleeps",
    "a fox runs",
] * 5


def _deploy(
    admin: PulsarAdminRest,
    auth: ClusterAuth,
    config_file: str,
    suffix: str,
    logs_dir: Path | None,
    **extra: Any,
) -> DeployedFunction:
    """Create the function of ``config_file`` with per-run topics; wait until it runs.

    Returns once its instances run and its input shows its subscription, so
    whatever the demo sends next reaches it.
    """
    entry, extras = FUNCTIONS[config_file]
    config = yaml.safe_load((_config_dir() / config_file).read_text())
    config["name"] = f"{config['name']}-{suffix}"
    config["inputs"] = [f"{config['inputs'][0]}-{suffix}"]
    if "output" in config:
        config["output"] = f"{config['output']}-{suffix}"
    config["userConfig"] = {**config.get("userConfig", {}), **extra}
    if auth.token():  # the functions' own admin calls authenticate with it
        config["secrets"] = {**config.get("secrets", {}), ADMIN_TOKEN_SECRET: auth.token()}
    fqn = (config["tenant"], config["namespace"], config["name"])
    with tempfile.TemporaryDirectory() as tmp:
        package = build_function_package(  # what `pulsar-state deploy` sends too
            name=config["name"], entry=_entry(entry), out_dir=Path(tmp), extras=extras
        )
        admin.create_function(fqn=fqn, config=config, code=package)
    function = DeployedFunction(
        admin=auth.admin_endpoint(admin.admin_url),
        fqn=fqn,
        logs_dir=logs_dir,
    )
    function.wait_ready(inputs=config["inputs"], instances=int(config["parallelism"]))
    return function


def _sink_demo(client: pulsar.Client, sink: DeployedFunction, topic: str, database: Path) -> None:
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
    say("  sending keyed orders to the SQL sink")
    for key, value in orders:
        producer.send(value.encode(), partition_key=key)
        expected[key] = value
    producer.send(b"", partition_key="order-0")  # an empty value deletes the row
    del expected["order-0"]
    try:
        sink.wait_for(
            lambda: table() == expected,
            what=f"the table kv in {database} to hold {expected}",
            timeout_s=120,
            seen=lambda: f"it holds {table()}",
        )
        say(f"  table kv in {database} (effectively once, latest per key):")
        for key, value in table().items():
            say(f"    {key:8} {value}")
    finally:
        backend.close()


def functions_demo(
    service_url: str,
    admin_url: str,
    suffix: str,
    *,
    logs_dir: Path | None = None,
    auth: ClusterAuth | None = None,
) -> None:
    """Deploy the packaged functions with per-run topics, drive them, show their effects.

    Each step waits on a condition (instances running and subscribed, a count
    reached, an answer received), bounded, and fails with
    :class:`~pulsar_state.deploy.errors.FunctionNotReadyError` naming the function and
    its log (under ``logs_dir`` for the embedded broker).
    """
    step("packaged functions on the shared state (deployed from deploy/functions/*.yaml)")
    auth = auth or ClusterAuth()
    admin = PulsarAdminRest.with_auth(admin_url, auth)
    client = pulsar.Client(service_url, logger=client_logger(), **auth.client_kwargs())
    state_topic = full_topic_name(f"wordcount-state-{suffix}")
    records_topic = full_topic_name(f"function-metadata-{suffix}")
    deployed: list[DeployedFunction] = []
    try:
        wc = _deploy(
            admin,
            auth,
            "wordcount.yaml",
            suffix,
            logs_dir,
            stateTopic=state_topic,
            adminUrl=admin_url,
        )
        deployed.append(wc)
        fmm = _deploy(
            admin,
            auth,
            "metadata-manager.yaml",
            suffix,
            logs_dir,
            metadataTopic=records_topic,
            adminUrl=admin_url,
        )
        deployed.append(fmm)
        database = Path(tempfile.gettempdir()) / f"pulsar-state-demo-{suffix}.db"
        sink = _deploy(
            admin,
            auth,
            "sql-sink.yaml",
            suffix,
            logs_dir,
            database=str(database),
            metadataTopic=full_topic_name(f"sql-sink-metadata-{suffix}"),
            adminUrl=admin_url,
        )
        deployed.append(sink)
        say(f"  running and subscribed: {wc.name} (2 instances), {fmm.name}, {sink.name}")

        producer = client.create_producer(full_topic_name(f"wordcount-in-{suffix}"))
        say("  sending lines to the word count")
        for line in LINES:
            producer.send(line.encode())
        expected = Counter(w for line in LINES for w in line.split())
        with PulsarMap[str, Any](
            client,
            state_topic,
            admin=auth.admin_endpoint(admin_url),
        ) as counts:
            wc.wait_for(
                lambda: counts.get("counter/the", latest=True).result(60) == expected["the"],
                what=f"the count of 'the' to reach {expected['the']}",
                timeout_s=120,
                seen=lambda: f"it is {counts.get('counter/the', latest=True).result(60)}",
            )
            got = {
                k.removeprefix("counter/"): v
                for k, v in counts.items().result(60).items()
                if k.startswith("counter/")
            }
        top = ", ".join(f"{w}={n}" for w, n in sorted(got.items(), key=lambda x: -x[1])[:6])
        say(f"  counters (effectively once): {top}  exact={got == dict(expected)}")

        requests = client.create_producer(full_topic_name(f"function-metadata-requests-{suffix}"))
        answers_topic = full_topic_name(f"function-metadata-answers-{suffix}")
        answers = client.subscribe(
            answers_topic, "demo", initial_position=pulsar.InitialPosition.Earliest
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
            msg = fmm.receive(
                answers,
                what=f"the answer to {request['op']} {request['fqn']} on {answers_topic}",
                timeout_s=60,
            )
            answers.acknowledge(msg)
            answer = json.loads(msg.data())
            verdict = (
                f"version {answer['version']}" if answer["ok"] else f"refused: {answer['error']}"
            )
            say(f"  metadata {request['op']:6} {request['fqn']}: {verdict}")

        _sink_demo(client, sink, full_topic_name(f"sql-sink-input-{suffix}"), database)

    finally:
        for function in deployed:
            try:
                admin.delete_function(function.fqn)
                admin.delete_packages(function.fqn)
            except PulsarStateError as exc:
                say(f"  could not delete {function.name}: {exc}", err=True)
            function.close()
        client.close()
        admin.close()
