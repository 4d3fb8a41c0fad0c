"""Functions on a secured cluster: the packaged functions DEPLOYED to a functions
worker that enforces token authentication and authorization (issue #15).

A private standalone runs the functions worker with JWT authentication and
authorization on (``TokenAuthority``; roles ``admin``, the super-user, and
``reader``, consume only). In a standalone the worker takes the broker's
authentication settings (``authenticationEnabled``, ``authorizationEnabled``,
``superUserRoles``, ``brokerClientAuthenticationPlugin``/``Parameters``) and
its process runtime hands the broker-client credentials to every instance, so
an instance's Pulsar client connects as the worker's role; the function's own
admin REST calls (protecting its state topic) carry the function secret
``adminToken`` and nothing else.

* ``pulsar-state deploy`` with a token deploys the shipped configs as they are,
  fills ``secrets.adminToken`` in, and one record through the word count
  updates its map, on a topic the function protected itself;
* without a token, ``deploy`` is refused and creates nothing;
* the word count deployed with ``bin/pulsar-admin`` without ``adminToken`` (or
  with a consume-only one) is refused where a user looks (``functions
  status``, the instance's log), writes nothing, and holds the record: given
  the admin token, it applies it once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pytest
import requests
import yaml
from harness import REPO_ROOT, TEST_BROKER_SETTINGS, pulsar_state_cli, session_data_dir, wait_until

from pulsar_state import PulsarMap, StateConfig
from pulsar_state.cluster.admin import topic_path
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.deploy.function_package import build_function_package
from pulsar_state.deploy.function_ready import DeployedFunction
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.deploy.standalone import StandaloneBroker
from pulsar_state.deploy.token_auth import TokenAuthority

# a functions worker's start, a deploy of every shipped function and instance
# restarts, on 2 shared cores: well past the suite's default 300 s per test when busy
pytestmark = [pytest.mark.functions, pytest.mark.timeout(900)]

NAMESPACE = "public/default"
SHIPPED = REPO_ROOT / "deploy" / "functions"


@dataclass
class SecuredWorker:
    """A standalone whose functions worker enforces token auth (see the module doc)."""

    service_url: str
    admin_url: str
    authority: TokenAuthority
    logs_dir: Path

    def client(self, role: str) -> pulsar.Client:
        return pulsar.Client(
            self.service_url,
            authentication=pulsar.AuthenticationToken(self.authority.token(role)),
            operation_timeout_seconds=15,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )

    def headers(self, role: str = "admin") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.authority.token(role)}"}

    def get(self, path: str, **params: str) -> requests.Response:
        """An admin GET as the super-user."""
        return requests.get(
            f"{self.admin_url}{path}", params=params, headers=self.headers(), timeout=30
        )

    def pulsar_admin(self) -> PulsarAdminCli:
        """The distribution's ``bin/pulsar-admin``, authenticated as the super-user."""
        auth = ClusterAuth(auth_token=self.authority.superuser_token)
        return PulsarAdminCli(admin_url=self.admin_url, auth=auth, timeout_s=240)

    def items(self, topic: str) -> dict[str, Any]:
        """The map on ``topic`` as a token client reads it (no admin call: read only)."""
        client = self.client("admin")
        try:
            config = StateConfig(ensure_retention=False, operation_timeout_s=15)
            with PulsarMap[str, Any](client, topic, config=config) as m:
                return m.items(latest=True).result(60)
        finally:
            client.close()

    def retention(self, topic: str) -> Any:
        resp = self.get(f"/admin/v2/{topic_path(topic)}/retention", applied="false")
        assert resp.status_code == 200, resp.text
        return resp.json()

    def topic_exists(self, topic: str) -> bool:
        resp = self.get(f"/admin/v2/{topic_path(topic)}/stats")
        assert resp.status_code in (200, 404), resp.text
        return resp.status_code == 200


@pytest.fixture(scope="module")
def secured_worker() -> Iterator[SecuredWorker]:
    base = str(session_data_dir())
    authority = TokenAuthority()
    broker = StandaloneBroker(
        data_dir=Path(base + "-fnauth"),
        functions=True,
        # inactive topics go in seconds, so an unprotected state topic would be noticed
        broker_settings={**TEST_BROKER_SETTINGS, **authority.broker_settings()},
        admin_token=authority.superuser_token,
    )
    broker.stop()  # one left by an interrupted session
    info = broker.start(fresh=True)  # bounded by its start_timeout_s, with the log's tail
    try:
        grant = requests.post(
            f"{info.admin_url}/admin/v2/namespaces/{NAMESPACE}/permissions/reader",
            json=["consume"],
            headers={"Authorization": f"Bearer {authority.superuser_token}"},
            timeout=30,
        )
        assert grant.status_code in (200, 204), grant.text
        yield SecuredWorker(info.service_url, info.admin_url, authority, broker.log_file.parent)
    finally:
        broker.stop()


def _deploy(worker: SecuredWorker, token: str | None) -> Any:
    env = {"PULSAR_ADMIN_URL": worker.admin_url}
    if token:
        env["PULSAR_AUTH_TOKEN"] = token
        # the functions' own admin token, given on purpose (deploy never copies its own)
        env["PULSAR_STATE_FUNCTION_AUTH_TOKEN"] = token
    # nothing of the shared test broker's environment (PULSAR_*) leaks in
    return pulsar_state_cli("deploy", "--wait-s", "240", env=env, drop=("PULSAR_",), timeout_s=480)


def _functions(worker: SecuredWorker) -> list[str]:
    resp = worker.get(f"/admin/v3/functions/{NAMESPACE}")
    assert resp.status_code == 200, resp.text
    names: list[str] = resp.json()
    return names


@pytest.fixture(scope="module")
def anonymous_deploy(secured_worker: SecuredWorker) -> Any:
    """``pulsar-state deploy`` without a token (what it printed)."""
    return _deploy(secured_worker, None)


def test_deploy_without_a_token_or_with_a_consume_only_one_is_refused_and_creates_nothing(
    secured_worker: SecuredWorker, anonymous_deploy: Any
) -> None:
    assert anonymous_deploy.returncode != 0, anonymous_deploy.stdout
    assert "401" in anonymous_deploy.stderr, anonymous_deploy.stderr
    assert "Traceback" not in anonymous_deploy.stderr
    reader = _deploy(secured_worker, secured_worker.authority.token("reader"))
    assert reader.returncode != 0, reader.stdout
    assert "401" in reader.stderr or "403" in reader.stderr, reader.stderr
    assert "Traceback" not in reader.stderr
    assert _functions(secured_worker) == []


def test_a_refused_deploy_says_why_in_one_line(anonymous_deploy: Any) -> None:
    assert "Authentication required" in anonymous_deploy.stderr, anonymous_deploy.stderr
    assert "<html>" not in anonymous_deploy.stderr, anonymous_deploy.stderr


def _receive(consumer: pulsar.Consumer, what: str, timeout_s: float) -> pulsar.Message:
    """The next message on ``consumer`` within ``timeout_s``, or a failure saying ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: nothing within {timeout_s:.0f}s") from None


def test_deploy_with_a_token_runs_the_shipped_functions_and_their_admin_calls_authenticate(
    secured_worker: SecuredWorker,
) -> None:
    token = secured_worker.authority.superuser_token
    deployed = _deploy(secured_worker, token)
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    shipped = sorted(SHIPPED.glob("*.yaml"))
    for config_file in shipped:
        config = yaml.safe_load(config_file.read_text())
        fqn = f"{config['tenant']}/{config['namespace']}/{config['name']}"
        # the token deploy uses is each function's adminToken secret
        assert f"{fqn}: userConfig.adminUrl={secured_worker.admin_url}" in deployed.stdout
        assert "secrets.adminToken" in deployed.stdout.split(f"{fqn}: ", 1)[1].splitlines()[0]
        assert f"ready {fqn}: running, subscribed to " in deployed.stdout
    stored = secured_worker.get("/admin/v3/functions/public/default/wordcount")
    assert stored.json()["secrets"] == {"adminToken": token}

    # one record through the word count and one request to the metadata manager,
    # both exactly as shipped
    wordcount = yaml.safe_load((SHIPPED / "wordcount.yaml").read_text())
    manager = yaml.safe_load((SHIPPED / "metadata-manager.yaml").read_text())
    state_topic = wordcount["userConfig"]["stateTopic"]
    metadata_topic = manager["userConfig"]["metadataTopic"]
    request = {
        "op": "create",
        "fqn": "public/default/secured",
        "config": {"className": "x.Y", "inputs": ["persistent://public/default/x"]},
        "requestId": "secured-1",
    }
    client = secured_worker.client("admin")
    try:
        out = client.subscribe(wordcount["output"], "h15b-check")
        answers = client.subscribe(manager["output"], "h15b-check")
        client.create_producer(wordcount["inputs"][0]).send(b"hello world hello")
        client.create_producer(manager["inputs"][0]).send(json.dumps(request).encode())
        assert _receive(out, "the word count's output", 120).data() == b"hello world hello: 2"
        answer = json.loads(_receive(answers, "the metadata manager's answer", 120).data())
        assert (answer["requestId"], answer["ok"], answer["version"]) == ("secured-1", True, 0)
    finally:
        client.close()
    items = secured_worker.items(state_topic)
    assert items["counter/hello"] == 2
    assert items["counter/world"] == 1
    assert items["state/last"] == {"s": "hello world hello"}
    assert secured_worker.items(metadata_topic)["public/default/secured"]["version"] == 0
    # each function protected its topic itself: admin calls made with its adminToken
    for topic in (state_topic, metadata_topic):
        assert secured_worker.retention(topic) == {
            "retentionTimeInMinutes": -1,
            "retentionSizeInMB": -1,
        }, topic


@dataclass
class RefusedFunction:
    """The shipped word count under another name, deployed with ``bin/pulsar-admin``
    without ``adminToken``; one record sent and refused."""

    fqn: tuple[str, str, str]
    config: dict[str, Any]
    code: Path
    state_topic: str
    output: pulsar.Consumer
    refusal: str  # the newest user exception in ``functions status``
    log_text: str  # the instance's log


def _config_file(config: dict[str, Any], tmp: Path) -> Path:
    path = tmp / f"{config['name']}-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _user_exceptions(worker: SecuredWorker, fqn: tuple[str, str, str], since_ms: int) -> list[str]:
    """The user exceptions ``functions status`` reports, raised after ``since_ms``."""
    resp = worker.get("/admin/v3/functions/{}/{}/{}/status".format(*fqn))
    if resp.status_code != 200:
        return []
    found = []
    for instance in resp.json().get("instances") or []:
        for exc in (instance.get("status") or {}).get("latestUserExceptions") or []:
            if int(exc.get("timestampMs", 0)) > since_ms:
                found.append(str(exc.get("exceptionString", "")))
    return found


def _processed(worker: SecuredWorker, fqn: tuple[str, str, str]) -> int:
    status = worker.get("/admin/v3/functions/{}/{}/{}/status".format(*fqn)).json()
    return sum(
        int((i.get("status") or {}).get("numSuccessfullyProcessed", 0))
        for i in status.get("instances") or []
    )


def _instance_logs(worker: SecuredWorker, fqn: tuple[str, str, str]) -> str:
    folder = worker.logs_dir / "functions" / Path(*fqn)
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.glob("*.log")))


@pytest.fixture(scope="module")
def refused_function(
    secured_worker: SecuredWorker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RefusedFunction]:
    tmp = tmp_path_factory.mktemp("fnauth")
    code = build_function_package(
        name="wordcount",
        entry=REPO_ROOT / "functions" / "wordcount_entry.py",
        out_dir=tmp,
        extras=(),
        python_version=None,
        platform=None,
    )
    name = "wordcount-noauth"
    config = yaml.safe_load((SHIPPED / "wordcount.yaml").read_text())
    topic = f"persistent://{NAMESPACE}/{name}"
    config.update(name=name, inputs=[f"{topic}-in"], output=f"{topic}-out")
    # as the shipped file's comment says for plain pulsar-admin: set adminUrl; no secrets
    config["userConfig"].update(stateTopic=f"{topic}-state", adminUrl=secured_worker.admin_url)
    assert "secrets" not in config
    fqn = (config["tenant"], config["namespace"], name)
    secured_worker.pulsar_admin().create_function(
        fqn=fqn, config_file=_config_file(config, tmp), py=code
    )
    with DeployedFunction(
        admin_url=secured_worker.admin_url,
        fqn=fqn,
        logs_dir=secured_worker.logs_dir,
        headers=secured_worker.headers(),
    ) as function:
        function.wait_ready(inputs=config["inputs"], instances=config["parallelism"], timeout_s=180)

    client = secured_worker.client("admin")
    try:
        output = client.subscribe(config["output"], "h15b-check")
        sent_ms = int(time.time() * 1000) - 1
        client.create_producer(config["inputs"][0]).send(b"hello world hello")
        refusals = wait_until(
            lambda: _user_exceptions(secured_worker, fqn, sent_ms),
            timeout_s=120,
            interval_s=1,
            message=f"{name} reporting a user exception in functions status",
        )
        log_text = wait_until(
            lambda: (
                (text := _instance_logs(secured_worker, fqn))
                and "PermissionDenied" in text
                and text
            ),
            timeout_s=60,
            interval_s=1,
            message=f"{name}'s instance log naming the refusal",
        )
        yield RefusedFunction(
            fqn=fqn,
            config=config,
            code=code,
            state_topic=config["userConfig"]["stateTopic"],
            output=output,
            refusal=refusals[-1],
            log_text=log_text,
        )
    finally:
        client.close()


def test_a_function_without_its_admin_token_is_refused_where_users_look_and_writes_nothing(
    secured_worker: SecuredWorker, refused_function: RefusedFunction
) -> None:
    refused = refused_function
    last_line = refused.refusal.strip().splitlines()[-1]
    # functions status: the reason, naming the topic and the refusal
    assert last_line.startswith("pulsar_state.errors.PermissionDeniedError: "), refused.refusal
    assert f"creating {refused.state_topic}: " in last_line
    assert "(401: " in last_line  # no credentials on the admin call
    # the instance's log says the same, and that the record is held, not skipped
    assert last_line in refused.log_text
    assert "later messages held" in refused.log_text
    # nothing written: no state topic (a refused open creates nothing), no output
    assert not secured_worker.topic_exists(refused.state_topic)
    assert _processed(secured_worker, refused.fqn) == 0
    with pytest.raises(pulsar.Timeout):
        refused.output.receive(timeout_millis=2000)


def test_the_refusal_names_the_function_secret_to_set(refused_function: RefusedFunction) -> None:
    last_line = refused_function.refusal.strip().splitlines()[-1]
    assert "adminToken" in last_line, last_line


def _update(worker: SecuredWorker, refused: RefusedFunction, token: str, tmp: Path) -> int:
    """``functions update`` with ``secrets.adminToken`` = ``token``; when it was sent (ms)."""
    config = {**refused.config, "secrets": {"adminToken": token}}
    since = int(time.time() * 1000)
    worker.pulsar_admin().run(
        "functions",
        "update",
        "--function-config-file",
        str(_config_file(config, tmp)),
        "--py",
        str(refused.code),
    )
    return since


def test_a_consume_only_token_is_refused_too_and_the_admin_token_applies_the_held_record_once(
    secured_worker: SecuredWorker, refused_function: RefusedFunction, tmp_path: Path
) -> None:
    refused = refused_function
    reader = secured_worker.authority.token("reader")
    since = _update(secured_worker, refused, reader, tmp_path)
    # (an instance still without a token may report its 401 after `since`)
    again = wait_until(
        lambda: [e for e in _user_exceptions(secured_worker, refused.fqn, since) if "(403: " in e],
        timeout_s=180,
        interval_s=1,
        message="the instances restarted with the consume-only token reporting a 403 refusal",
    )
    last_line = again[-1].strip().splitlines()[-1]
    assert last_line.startswith("pulsar_state.errors.PermissionDeniedError: "), again[-1]
    assert f"creating {refused.state_topic}: not permitted for this role (403: " in last_line
    assert "'adminToken', which is set" in last_line, last_line
    assert not secured_worker.topic_exists(refused.state_topic)

    # with the admin token, the record held since the first refusal is applied, once
    _update(secured_worker, refused, secured_worker.authority.superuser_token, tmp_path)
    answer = _receive(refused.output, "the held record's output after the update", 180)
    assert answer.data() == b"hello world hello: 2"
    items = secured_worker.items(refused.state_topic)
    assert (items["counter/hello"], items["counter/world"]) == (2, 1)
    assert secured_worker.retention(refused.state_topic) == {
        "retentionTimeInMinutes": -1,
        "retentionSizeInMB": -1,
    }
    with pytest.raises(pulsar.Timeout):  # and only once
        refused.output.receive(timeout_millis=3000)
