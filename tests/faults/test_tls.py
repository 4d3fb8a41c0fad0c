"""TLS: a standalone that serves the binary protocol and the admin API over TLS.

The broker's certificate is signed by a private CA (``trustme``), so nothing
trusts it by default: each entry point must be told to, the way ``pulsar-admin``
and ``pulsar-client`` spell it (``--tls-trust-cert-path``, env
``PULSAR_TLS_TRUST_CERT_PATH``; in code, the client's
``tls_trust_certs_file_path`` and the core's ``AdminEndpoint(tls_trust_cert_path=...)``), and
one that is not must fail with a clear message, never hang or change anything.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pulsar
import pytest
import requests
import trustme
from harness import pulsar_state_cli, unique_topic
from tls_brokers import TlsBroker, tls_standalone

from pulsar_state import (
    AdminEndpoint,
    ConfigurationError,
    MetadataStore,
    PulsarMap,
    PulsarStateError,
)
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.connectors.sink import SinkRecord, SqlUpsertSink
from pulsar_state.connectors.sink_runner import run_sink
from pulsar_state.deploy.demo import _shared_state_demo
from pulsar_state.deploy.errors import FunctionNotReadyError
from pulsar_state.deploy.function_ready import DeployedFunction
from pulsar_state.deploy.functions_deploy import _wait_ready
from pulsar_state.functions.function_map import open_function_map
from pulsar_state.functions.metadata_manager import FunctionMetadataManager
from pulsar_state.position import Position
from pulsar_state.topic_names import admin_path


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    with tls_standalone(tmp_path_factory.mktemp("tls"), "tls") as broker:
        yield broker


def test_the_admin_api_and_the_broker_really_speak_tls(tls_broker: TlsBroker) -> None:
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{tls_broker.admin_url}/admin/v2/clusters", timeout=30)
    listed = requests.get(
        f"{tls_broker.admin_url}/admin/v2/clusters", verify=tls_broker.ca_file, timeout=30
    )
    assert listed.status_code == 200, listed.text


def test_the_core_over_tls_with_the_trusted_ca(tls_broker: TlsBroker) -> None:
    topic = unique_topic("tls")
    client = tls_broker.client()
    try:
        with PulsarMap[str, int](
            client,
            topic,
            admin=AdminEndpoint(url=tls_broker.admin_url, tls_trust_cert_path=tls_broker.ca_file),
        ) as m:
            m.put("a", 1).result(60)
            assert m.get("a", latest=True).result(60) == 1
        with MetadataStore(
            client,
            unique_topic("tls-meta"),
            admin=AdminEndpoint(url=tls_broker.admin_url, tls_trust_cert_path=tls_broker.ca_file),
        ) as store:
            store.put("/x", b"1", -1).result(60)
            got = store.get("/x").result(60)
            assert got is not None and got.value == b"1"
    finally:
        client.close()


def test_the_core_refuses_an_admin_url_it_cannot_trust(tls_broker: TlsBroker) -> None:
    client = tls_broker.client()
    try:
        with pytest.raises(PulsarStateError, match="certificate") as refused:
            PulsarMap[str, int](
                client, unique_topic("tls-untrusted"), admin_url=tls_broker.admin_url
            )
        assert tls_broker.admin_url in str(refused.value)
        with pytest.raises(ConfigurationError, match="is not a file"):
            PulsarMap[str, int](
                client,
                unique_topic("tls-nofile"),
                admin=AdminEndpoint(
                    url=tls_broker.admin_url, tls_trust_cert_path="/nonexistent/ca.pem"
                ),
            )
    finally:
        client.close()


def _cli(tls_broker: TlsBroker, *args: str, trust: bool = True) -> subprocess.CompletedProcess[str]:
    """``pulsar-state`` as a user runs it against the TLS listeners (env settings)."""
    env = {"PULSAR_SERVICE_URL": tls_broker.service_url, "PULSAR_ADMIN_URL": tls_broker.admin_url}
    if trust:
        env["PULSAR_TLS_TRUST_CERT_PATH"] = tls_broker.ca_file
    return pulsar_state_cli(*args, env=env, drop=("PULSAR_TLS_TRUST_CERT_PATH",))


def test_the_cli_writes_and_reads_over_tls(tls_broker: TlsBroker) -> None:
    topic = unique_topic("tls-cli")
    put = _cli(tls_broker, "map", "--topic", topic, "put", "k", "41")
    assert put.returncode == 0, put.stderr
    got = _cli(tls_broker, "map", "--topic", topic, "get", "k")
    assert (got.returncode, got.stdout.strip()) == (0, "41"), got.stderr
    flagged = subprocess.run(
        [
            str(Path(sys.executable).parent / "pulsar-state"),
            "meta",
            "--topic",
            unique_topic("tls-cli-meta"),
            "--service-url",
            tls_broker.service_url,
            "--admin-url",
            tls_broker.admin_url,
            "--tls-trust-cert-path",
            tls_broker.ca_file,
            "put",
            "/a",
            "v",
        ],
        env={k: v for k, v in os.environ.items() if not k.startswith("PULSAR_")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert flagged.returncode == 0, flagged.stderr


def test_the_cli_without_the_ca_fails_clearly(tls_broker: TlsBroker) -> None:
    topic = unique_topic("tls-cli-untrusted")
    put = _cli(tls_broker, "map", "--topic", topic, "put", "k", "1", trust=False)
    assert put.returncode == 1, put.stderr
    assert "Traceback" not in put.stderr
    assert "certificate" in put.stderr.lower() or "tls" in put.stderr.lower(), put.stderr


# -- the packaged functions' and the SQL sink's own admin calls (issue 15) ------------------


def _function_context(client: pulsar.Client, user_config: dict[str, Any]) -> Any:
    """What a function instance's runtime context offers (no worker: the TLS standalone
    runs none); a real client and the real TLS admin API behind it."""
    return SimpleNamespace(
        get_user_config_value=user_config.get,
        get_user_config_map=lambda: dict(user_config),
        get_function_tenant=lambda: "public",
        get_function_namespace=lambda: "default",
        get_function_name=lambda: "tls-fn",
        get_instance_id=lambda: 0,
        get_pulsar_client=lambda: client,
        get_secret=lambda _key: None,
        get_logger=lambda: logging.getLogger("function"),
        record_metric=lambda *_: None,
    )


def _create_request(fqn: str) -> str:
    config = {"className": "x.Y", "inputs": ["persistent://public/default/in"]}
    return json.dumps({"op": "create", "fqn": fqn, "config": config})


def test_a_packaged_function_trusts_the_ca_its_user_config_names(tls_broker: TlsBroker) -> None:
    client = tls_broker.client()
    manager = FunctionMetadataManager()
    try:
        context = _function_context(
            client,
            {
                "adminUrl": tls_broker.admin_url,
                "tlsTrustCertsFilePath": tls_broker.ca_file,
                "metadataTopic": unique_topic("tls-fn-meta"),
            },
        )
        answer = json.loads(manager.process(_create_request("public/default/tls-fn"), context))
        assert answer["ok"], answer
        topic = manager._records(context).manager.topic
        retention = requests.get(
            f"{tls_broker.admin_url}/admin/v2/{admin_path(topic)}/retention",
            params={"applied": "false"},
            verify=tls_broker.ca_file,
            timeout=30,
        )
        assert retention.json() == {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    finally:
        manager.close()
        client.close()


def test_a_function_without_the_ca_or_with_a_missing_one_fails_clearly(
    tls_broker: TlsBroker,
) -> None:
    client = tls_broker.client()
    try:
        untrusted = _function_context(
            client, {"adminUrl": tls_broker.admin_url, "stateTopic": unique_topic("tls-fn-no")}
        )
        with pytest.raises(PulsarStateError, match="certificate") as refused:
            open_function_map(untrusted, "stateTopic", "unused")
        assert "tlsTrustCertsFilePath" in str(refused.value)  # the key a function user sets
        missing = _function_context(
            client,
            {
                "adminUrl": tls_broker.admin_url,
                "tlsTrustCertsFilePath": "/nonexistent/ca.pem",
                "stateTopic": unique_topic("tls-fn-missing"),
            },
        )
        with pytest.raises(ConfigurationError, match=r"tlsTrustCertsFilePath.*nonexistent"):
            open_function_map(missing, "stateTopic", "unused")
        for bad in ("yes", 2):
            refused = _function_context(
                client, {"adminUrl": tls_broker.admin_url, "tlsAllowInsecureConnection": bad}
            )
            with pytest.raises(ConfigurationError, match="tlsAllowInsecureConnection"):
                open_function_map(refused, "stateTopic", "unused")
    finally:
        client.close()


def _keyed_record(tls_broker: TlsBroker, topic: str) -> SinkRecord:
    """One real record on ``topic`` (its position is one the topic has)."""
    client = tls_broker.client()
    try:
        producer = client.create_producer(topic)
        message_id = producer.send(b"v1", partition_key="k1")
        producer.close()
    finally:
        client.close()
    return SinkRecord(
        topic=topic, key="k1", value=b"v1", position=Position.from_message_id(message_id)
    )


def test_the_sinks_position_check_trusts_the_ca_of_its_config(
    tls_broker: TlsBroker, tmp_path: Path
) -> None:
    record = _keyed_record(tls_broker, unique_topic("tls-sink"))
    config = {
        "database": str(tmp_path / "sink.db"),
        "adminUrl": tls_broker.admin_url,
        "tlsTrustCertsFilePath": tls_broker.ca_file,
    }
    sink = SqlUpsertSink()
    sink.open(config)
    try:
        assert sink.write(record) is True
        # the redelivery is checked against the topic's ledgers over TLS, then skipped
        assert sink.write(record) is False
        assert sink.position_checks == {"redelivery": 1}
    finally:
        sink.close()
    # the runner hands its --tls-trust-cert-path to the same check
    sink = SqlUpsertSink()
    sink.open(
        {k: v for k, v in config.items() if k != "tlsTrustCertsFilePath"},
        admin=AdminEndpoint(url=tls_broker.admin_url, tls_trust_cert_path=tls_broker.ca_file),
    )
    try:
        assert sink.write(record) is False
        assert sink.position_checks == {"redelivery": 1}
    finally:
        sink.close()


def test_the_sink_runner_checks_redeliveries_over_tls(
    tls_broker: TlsBroker, tmp_path: Path
) -> None:
    topic = unique_topic("tls-runner")
    _keyed_record(tls_broker, topic)
    config = {
        "serviceUrl": tls_broker.service_url,
        "topic": topic,
        "subscription": "first",
        "database": str(tmp_path / "runner.db"),
        "adminUrl": tls_broker.admin_url,
    }
    auth = ClusterAuth(tls_trust_cert_path=tls_broker.ca_file)
    stop = threading.Event()
    timer = threading.Timer(90, stop.set)  # bound: a check that never succeeds retries
    timer.start()
    try:
        assert run_sink(config, max_idle_s=2, stop=stop, auth=auth).written == 1
        # a second subscription reads the record again: a redelivery, checked and skipped
        again = run_sink({**config, "subscription": "second"}, max_idle_s=2, stop=stop, auth=auth)
        assert not stop.is_set(), "the runner kept retrying the position check"
        assert (again.written, again.skipped) == (0, 1)
        assert again.position_checks == {"redelivery": 1}
    finally:
        timer.cancel()


def _insecure_cli(tls_broker: TlsBroker, *args: str) -> subprocess.CompletedProcess[str]:
    """``pulsar-state`` against the TLS listeners, told nothing about the CA."""
    env = {"PULSAR_SERVICE_URL": tls_broker.service_url, "PULSAR_ADMIN_URL": tls_broker.admin_url}
    return pulsar_state_cli(*args, env=env, drop=("PULSAR_", "REQUESTS_CA"))


def test_tls_allow_insecure_reaches_the_cli_admin_calls(tls_broker: TlsBroker) -> None:
    topic = unique_topic("tls-insecure")
    assert _cli(tls_broker, "map", "--topic", topic, "put", "k", "7").returncode == 0
    refused = _insecure_cli(tls_broker, "map", "--topic", topic, "get", "k")
    assert refused.returncode == 1, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "certificate" in refused.stderr.lower(), refused.stderr
    got = _insecure_cli(tls_broker, "map", "--topic", topic, "--tls-allow-insecure", "get", "k")
    assert (got.returncode, got.stdout.strip()) == (0, "7"), got.stderr
    assert "not checked" in got.stderr, got.stderr  # said once, not per request
    assert "InsecureRequestWarning" not in got.stderr


def test_tls_allow_insecure_reaches_the_cores_writes(tls_broker: TlsBroker) -> None:
    """map put/delete and meta open a PulsarMap / MetadataStore, whose admin client
    takes the flag too (it refused the certificate before)."""
    topic = unique_topic("tls-insecure-put")
    for args in (("put", "k", "8"), ("delete", "k"), ("put", "k", "9")):
        done = _insecure_cli(tls_broker, "map", "--topic", topic, "--tls-allow-insecure", *args)
        assert done.returncode == 0, done.stderr
        assert "InsecureRequestWarning" not in done.stderr
    got = _cli(tls_broker, "map", "--topic", topic, "get", "k")  # checked with the CA
    assert (got.returncode, got.stdout.strip()) == (0, "9"), got.stderr
    meta = unique_topic("tls-insecure-meta")
    done = _insecure_cli(
        tls_broker, "meta", "--topic", meta, "--tls-allow-insecure", "put", "/a", "x"
    )
    assert done.returncode == 0, done.stderr
    refused = _insecure_cli(tls_broker, "meta", "--topic", meta, "put", "/b", "x")
    assert refused.returncode == 1 and "certificate" in refused.stderr.lower(), refused.stderr


def test_a_packaged_function_with_tls_allow_insecure_opens_its_state(
    tls_broker: TlsBroker,
) -> None:
    client = tls_broker.client()
    manager = FunctionMetadataManager()
    try:
        context = _function_context(
            client,
            {
                "adminUrl": tls_broker.admin_url,
                "tlsAllowInsecureConnection": "true",
                "metadataTopic": unique_topic("tls-fn-insecure"),
            },
        )
        answer = json.loads(manager.process(_create_request("public/default/tls-fn2"), context))
        assert answer["ok"], answer
    finally:
        manager.close()
        client.close()


def test_a_sink_runner_group_opens_its_topics_over_tls(
    tls_broker: TlsBroker, tmp_path: Path
) -> None:
    """A group's membership store and assignment map protect their topics through the
    same admin API as the runner's other calls, with the runner's --tls-trust-cert-path."""
    topic = unique_topic("tls-group")
    _keyed_record(tls_broker, topic)
    config = {
        "serviceUrl": tls_broker.service_url,
        "topic": topic,
        "subscription": "group",
        "database": str(tmp_path / "group.db"),
        "adminUrl": tls_broker.admin_url,
        "assignmentTopic": f"{topic}-assignments",
        "memberId": "m0",
        "sessionTimeoutS": 4,
        "sessionCheckIntervalS": 0.5,
    }
    stop = threading.Event()
    timer = threading.Timer(90, stop.set)  # bound: the record never assigned would idle forever
    timer.start()
    try:
        auth = ClusterAuth(tls_trust_cert_path=tls_broker.ca_file)
        sink = run_sink(config, max_idle_s=20, stop=stop, auth=auth)
        assert (sink.written, sink.skipped) == (1, 0)
    finally:
        timer.cancel()


def test_deploys_readiness_wait_trusts_the_ca_deploy_was_given(tls_broker: TlsBroker) -> None:
    """``pulsar-state deploy --tls-trust-cert-path`` creates functions with that trust and
    then waits for them through the admin API: the wait must trust the same CA."""
    topic = unique_topic("tls-ready")
    client = tls_broker.client()
    consumer = client.subscribe(topic, "public/default/tls-ready-fn")
    try:
        # the same wait as deploy's: this broker runs no functions worker, so it times
        # out, but on what the worker says, not on the admin API's certificate
        with pytest.raises(FunctionNotReadyError) as waited:
            _wait_ready(
                tls_broker.admin_url,
                [(("public", "default", "tls-ready-fn"), {"inputs": [topic]})],
                3,
                ClusterAuth(tls_trust_cert_path=tls_broker.ca_file),
                lambda _line: None,
            )
        assert "certificate" not in str(waited.value).lower(), waited.value
        function = DeployedFunction(
            admin_url=tls_broker.admin_url,
            fqn=("public", "default", "tls-ready-fn"),
            verify=ClusterAuth(tls_trust_cert_path=tls_broker.ca_file).requests_verify(),
        )
        try:
            assert function.consumers(topic) == 1
        finally:
            function.close()
    finally:
        consumer.close()
        client.close()


def test_querystate_honours_tls_allow_insecure(tls_broker: TlsBroker) -> None:
    """``functions querystate`` looks the function up through the admin API: refused on
    the certificate without the flag; with --tls-allow-insecure the call reaches the
    broker, whose answer is reported: this standalone runs no functions worker (409)
    and no worker group's record names the function, so it does not exist (exit 3)."""
    args = ["functions", "querystate", "--name", "tls-qs", "--key", "apples"]
    refused = _insecure_cli(tls_broker, *args)
    assert refused.returncode == 1, refused.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in refused.stderr, refused.stderr
    got = _insecure_cli(tls_broker, *args, "--tls-allow-insecure")
    assert "CERTIFICATE_VERIFY_FAILED" not in got.stderr, got.stderr
    assert got.returncode == 3 and "tls-qs doesn't exist" in got.stderr, got.stderr


def test_the_demos_shared_state_step_on_a_tls_cluster(tls_broker: TlsBroker) -> None:
    """``pulsar-state demo --service-url ... --admin-url https://... --tls-trust-cert-path``:
    its maps protect their topic through the admin API with the CA it was given (the
    functions steps need a worker, which this standalone does not run)."""
    auth = ClusterAuth(tls_trust_cert_path=tls_broker.ca_file)
    _shared_state_demo(
        tls_broker.service_url, tls_broker.admin_url, unique_topic("x").rsplit("-", 1)[1], auth
    )


def test_sink_run_takes_the_tls_trust_of_its_yaml_for_every_call(
    tls_broker: TlsBroker, tmp_path: Path
) -> None:
    """``pulsar-state sink run --config sink.yaml`` whose CA comes only from the YAML's
    ``tlsTrustCertsFilePath``: the client, the metadata map's admin calls and the
    position check all trust it (only the position check did before)."""
    topic = unique_topic("tls-yaml")
    _keyed_record(tls_broker, topic)
    config = {
        "serviceUrl": tls_broker.service_url,
        "topic": topic,
        "subscription": "yaml",
        "database": str(tmp_path / "yaml.db"),
        "adminUrl": tls_broker.admin_url,
        "metadataTopic": f"{topic}-metadata",
        "tlsTrustCertsFilePath": tls_broker.ca_file,
    }
    path = tmp_path / "sink.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    done = pulsar_state_cli(
        "sink",
        "run",
        "--config",
        str(path),
        "--max-idle-s",
        "2",
        env={},
        drop=("PULSAR_", "REQUESTS_CA"),
        timeout_s=90,
    )
    assert done.returncode == 0, done.stderr
    assert "written 1, skipped 0" in done.stdout, done.stdout + done.stderr
    # a trust path on the command line wins over the YAML's (here: a wrong one)
    wrong = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(wrong))
    refused = pulsar_state_cli(
        "sink",
        "run",
        "--config",
        str(path),
        "--max-idle-s",
        "2",
        "--tls-trust-cert-path",
        str(wrong),
        env={},
        drop=("PULSAR_", "REQUESTS_CA"),
        timeout_s=90,
    )
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr
    assert "certificate" in refused.stderr.lower(), refused.stderr
