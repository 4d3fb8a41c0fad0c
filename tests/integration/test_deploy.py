"""``pulsar-state deploy`` / ``undeploy``: every packaged function from its config file."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pulsar
import pytest
import yaml
from harness import PulsarEndpoint, unique_name, wait_until

from pulsar_state.cluster.admin import PulsarAdmin
from pulsar_state.config import StateConfig
from pulsar_state.connectors.sink import open_backend
from pulsar_state.connectors.sql_backend import SinkDatabaseError
from pulsar_state.deploy.distribution import PulsarDistribution
from pulsar_state.deploy.functions_deploy import FUNCTIONS, _config_dir
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.functions.scheduler_member import SchedulerMember
from pulsar_state.map.pulsar_map import PulsarMap

#: the command a user runs: the console script installed next to this Python
PULSAR_STATE = Path(sys.executable).with_name("pulsar-state")


def _cli(endpoint: PulsarEndpoint, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``pulsar-state``, where no Java is found: it deploys through REST."""
    no_java = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if not Path(p, "java").exists()
    )
    return subprocess.run(
        [str(PULSAR_STATE), *args],
        env={
            **os.environ,
            "PULSAR_ADMIN_URL": endpoint.admin_url,
            "JAVA_HOME": "/nonexistent/java-home",
            "PATH": no_java,
        },
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


def _class_fields(data: bytes) -> set[str]:
    """The instance field names of a Java class file (JVM spec, chapter 4)."""
    pos = 10
    (count,) = struct.unpack_from(">H", data, 8)
    utf8: dict[int, str] = {}
    sizes = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2}
    sizes.update({17: 4, 18: 4, 19: 2, 20: 2})
    index = 1
    while index < count:
        tag = data[pos]
        if tag == 1:
            (length,) = struct.unpack_from(">H", data, pos + 1)
            utf8[index] = data[pos + 3 : pos + 3 + length].decode("utf-8", "replace")
            pos += 3 + length
        else:
            pos += 1 + sizes[tag]
        index += 2 if tag in (5, 6) else 1
    (interfaces,) = struct.unpack_from(">H", data, pos + 6)
    pos += 8 + 2 * interfaces
    (fields,) = struct.unpack_from(">H", data, pos)
    pos += 2
    names = set()
    for _ in range(fields):
        access, name, _desc, attributes = struct.unpack_from(">HHHH", data, pos)
        pos += 8
        for _ in range(attributes):
            (length,) = struct.unpack_from(">I", data, pos + 2)
            pos += 6 + length
        if not access & 0x0008:  # not static
            names.add(utf8[name])
    return names


def _function_config_fields() -> set[str]:
    """What Pulsar's FunctionConfig accepts, read from the distribution's own jar.

    ``pulsar-admin`` ignores an unknown key in a config file without a word
    (a misspelt ``subscriptionPositon`` would silently do nothing).
    """
    lib = PulsarDistribution().ensure().root / "lib"
    (jar,) = lib.glob("org.apache.pulsar-pulsar-client-admin-api-*.jar")
    with zipfile.ZipFile(jar) as zf:
        return _class_fields(zf.read("org/apache/pulsar/common/functions/FunctionConfig.class"))


def test_shipped_configs_parse_and_use_only_function_config_fields() -> None:
    accepted = _function_config_fields()
    assert {"tenant", "inputs", "userConfig", "subscriptionPosition"} <= accepted
    for config_file in FUNCTIONS:
        config = yaml.safe_load((_config_dir() / config_file).read_text())
        assert isinstance(config, dict), config_file
        unknown = set(config) - accepted
        assert not unknown, f"{config_file}: not FunctionConfig fields: {sorted(unknown)}"
        assert config["runtime"] == "PYTHON"
        assert isinstance(config.get("userConfig", {}), dict), config_file


def _shipped(config_file: str) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((_config_dir() / config_file).read_text())
    return config


def _one_record_through_each(endpoint: PulsarEndpoint) -> None:
    """Send one record through every deployed function; check what each one did."""
    wc, mm = _shipped("wordcount.yaml"), _shipped("metadata-manager.yaml")
    sink, sched = _shipped("sql-sink.yaml"), _shipped("scheduler.yaml")
    uid = unique_name("deploy").replace("-", "")
    client = pulsar.Client(
        endpoint.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    reader = StateConfig(ensure_retention=False)  # the functions must protect their topics
    admin = PulsarAdmin(endpoint.admin_url)
    try:
        # word count: a count
        client.create_producer(wc["inputs"][0]).send(f"{uid} {uid}".encode())
        with PulsarMap[str, Any](client, wc["userConfig"]["stateTopic"], config=reader) as counts:
            wait_until(
                lambda: counts.get(f"counter/{uid}", latest=True).result(60) == 2,
                timeout_s=120,
                interval_s=0.5,
                message=f"wordcount counted {uid} twice",
            )

        # metadata manager: an answer and a record
        fqn = f"deploytest/default/{uid}"
        answers = client.subscribe(mm["output"], unique_name("answers"))
        request = {
            "op": "create",
            "fqn": fqn,
            "config": {
                "className": "x.Y",
                "inputs": ["persistent://public/default/x"],
                "parallelism": 2,
            },
            "requestId": uid,
        }
        client.create_producer(mm["inputs"][0]).send(json.dumps(request).encode())

        def answered() -> dict[str, Any] | None:
            msg = answers.receive(timeout_millis=1000)
            answers.acknowledge(msg)
            answer: dict[str, Any] = json.loads(msg.data())
            return answer if answer.get("requestId") == uid else None

        answer = wait_until(answered, timeout_s=120, message=f"the metadata manager answers {uid}")
        assert answer["ok"] and answer["version"] == 0, answer
        records_topic = mm["userConfig"]["metadataTopic"]
        with PulsarMap[str, Any](client, records_topic, config=reader) as records:
            record = records.get(fqn, latest=True).result(60)
        assert record["version"] == 0 and record["config"]["parallelism"] == 2, record

        # scheduler: the new record's instances assigned to a live member
        with SchedulerMember(
            client,
            member_id=uid,
            heartbeat_topic=sched["inputs"][0],
            assignment_topic=sched["userConfig"]["assignmentTopic"],
            interval_s=1.0,
        ) as member:
            wait_until(
                lambda: {f"{fqn}:0", f"{fqn}:1"} <= set(member.assignments()),
                timeout_s=120,
                interval_s=0.5,
                message=f"the scheduler assigned {fqn}'s instances to {uid}",
            )

        # SQL sink: a row
        client.create_producer(sink["inputs"][0]).send(b'{"deployed": true}', partition_key=uid)
        backend = open_backend(sink["userConfig"]["database"])
        table = sink["userConfig"].get("table", "kv")

        def row() -> str | None:
            try:
                return backend.rows(table).get(uid)
            except SinkDatabaseError:  # not created yet
                return None

        try:
            wait_until(row, timeout_s=120, interval_s=0.5, message=f"the sink wrote row {uid}")
            assert row() == '{"deployed": true}'
        finally:
            backend.close()

        # every state topic the functions write is protected (adminUrl reached them)
        for topic in (
            wc["userConfig"]["stateTopic"],
            records_topic,
            sched["userConfig"]["assignmentTopic"],
            sink["userConfig"]["metadataTopic"],
        ):
            retention = admin.retention(topic)
            assert retention.get("retentionTimeInMinutes") == -1, (topic, retention)
        delete = {"op": "delete", "fqn": fqn, "expectedVersion": 0, "requestId": uid + "d"}
        client.create_producer(mm["inputs"][0]).send(json.dumps(delete).encode())
    finally:
        admin.close()
        client.close()


def _remove_sink_database() -> None:
    sink = yaml.safe_load((_config_dir() / "sql-sink.yaml").read_text())
    database = Path(sink["userConfig"]["database"])
    for leftover in (database, *database.parent.glob(database.name + "-*")):
        leftover.unlink(missing_ok=True)


# every step is a few pulsar-admin JVM runs per function, on a 2-core CI host:
# well past the suite's default 300 s when the machine is busy
@pytest.mark.timeout(2400)
def test_deploy_creates_updates_and_undeploy_deletes_every_function(
    pulsar_endpoint: PulsarEndpoint,
) -> None:
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    fqns = []
    for config_file in FUNCTIONS:
        config = yaml.safe_load((_config_dir() / config_file).read_text())
        fqns.append((config["tenant"], config["namespace"], config["name"], config["parallelism"]))
    # the shipped sink writes a SQLite file in /tmp, with the input positions it
    # applied: one left by an earlier run (another broker, whose ledger ids
    # were higher) would make the sink skip this run's records as redeliveries
    _remove_sink_database()
    try:
        first = _cli(pulsar_endpoint, "deploy")
        assert first.returncode == 0, first.stderr
        for tenant, namespace, name, parallelism in fqns:
            fqn = f"{tenant}/{namespace}/{name}"
            assert f"created {fqn}" in first.stdout
            # the shipped configs leave adminUrl to the cluster: deploy fills it in
            assert f"{fqn}: userConfig.adminUrl={pulsar_endpoint.admin_url}" in first.stdout
            assert f"ready {fqn}: running, subscribed to " in first.stdout
            wait_until(
                lambda t=tenant, ns=namespace, n=name, p=parallelism: (
                    admin.function_status((t, ns, n))["numRunning"] == p
                ),
                timeout_s=180,
                interval_s=1,
                message=f"{name} running",
            )
        _one_record_through_each(pulsar_endpoint)
        # deploying again updates in place (the command is idempotent)
        again = _cli(pulsar_endpoint, "deploy")
        assert again.returncode == 0, again.stderr
        assert again.stdout.count("updated ") == len(fqns)
        # undeploy, then deploy the same names again: Pulsar 4.0 keeps a deleted
        # function's code packages and refuses to create it again unless they go too
        gone = _cli(pulsar_endpoint, "undeploy")
        assert gone.returncode == 0, gone.stderr
        back = _cli(pulsar_endpoint, "deploy")
        assert back.returncode == 0, back.stderr
        assert back.stdout.count("created ") == len(fqns)
    finally:
        gone = _cli(pulsar_endpoint, "undeploy")
    assert gone.returncode == 0, gone.stderr
    listed = admin.run("functions", "list", "--tenant", "public", "--namespace", "default")
    for _, _, name, _ in fqns:
        assert f"deleted public/default/{name}" in gone.stdout
        assert name not in listed.split()
    # undeploying what is not there says so and succeeds
    twice = _cli(pulsar_endpoint, "undeploy")
    assert twice.returncode == 0, twice.stderr
    assert twice.stdout.count("was not deployed") == len(fqns)
