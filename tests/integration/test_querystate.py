"""Queryable state (issue #17, item 1): ``pulsar-state functions querystate`` and
``pulsar-state serve``, read by the distribution's own ``pulsar-admin``.

The state here is written straight into a function's default state topic (the
stateful kit's layout), with no function deployed: a deleted function's state
stays readable. ``test_pulsar_context_function`` reads a deployed function's.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import requests
from harness import PulsarEndpoint, unique_name

from pulsar_state import PulsarMap
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.errors import PulsarStateError
from pulsar_state.functions.queryable_state import default_state_topic

ENTRY_POINT = str(Path(sys.executable).parent / "pulsar-state")
QUERYSTATE = [ENTRY_POINT, "functions", "querystate"]


def _env(ep: PulsarEndpoint) -> dict[str, str]:
    return {**os.environ, "PULSAR_SERVICE_URL": ep.service_url, "PULSAR_ADMIN_URL": ep.admin_url}


def querystate(ep: PulsarEndpoint, name: str, key: str, tenant: str = "public") -> Any:
    """``pulsar-state functions querystate``: (exit code, parsed stdout or None, stderr)."""
    done = subprocess.run(
        [*QUERYSTATE, "--tenant", tenant, "--namespace", "default", "--name", name, "--key", key],
        env=_env(ep),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, (json.loads(done.stdout) if done.returncode == 0 else None), done.stderr


def _read_json_object(stream: IO[str], timeout_s: float) -> dict[str, Any]:
    """The next pretty-printed JSON object on ``stream`` (lines up to a closing ``}``)."""
    deadline = time.monotonic() + timeout_s
    lines: list[str] = []
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            raise AssertionError(f"the stream ended; read so far: {lines}")
        lines.append(line)
        if line.rstrip() == "}":
            parsed: dict[str, Any] = json.loads("".join(lines))
            return parsed
    raise AssertionError(f"no JSON object within {timeout_s}s; read so far: {lines}")


@pytest.fixture
def server(pulsar_endpoint: PulsarEndpoint) -> Iterator[str]:
    """``pulsar-state serve --port 0``, running; its base URL."""
    proc = subprocess.Popen(
        [ENTRY_POINT, "serve", "--port", "0"],
        env=_env(pulsar_endpoint),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # "serving ... on http://127.0.0.1:PORT"
        found = re.search(r"http://127\.0\.0\.1:(\d+)", first)
        assert found, (first, proc.stderr.read() if proc.poll() is not None else "")
        yield f"http://127.0.0.1:{found.group(1)}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        assert proc.stderr is not None
        assert "Traceback" not in proc.stderr.read()


@pytest.fixture
def function_state(pulsar_endpoint: PulsarEndpoint, client: Any) -> Iterator[str]:
    """A function name whose default state topic holds a counter, a text and bytes."""
    name = unique_name("qs")
    with PulsarMap[str, Any](
        client, default_state_topic("public", "default", name), admin_url=pulsar_endpoint.admin_url
    ) as state:
        state.put_all(
            {
                "counter/apples": 5,
                "state/greeting": {"s": "hello"},
                "state/raw": {"b": base64.b64encode(b"\xff\x00").decode()},
                "processed/some-input": "1:2:-1",
            }
        ).result(timeout=60)
    yield name


def test_querystate_answers_pulsars_function_state(
    pulsar_endpoint: PulsarEndpoint, function_state: str
) -> None:
    name = function_state
    code, apples, _ = querystate(pulsar_endpoint, name, "apples")
    assert code == 0
    assert apples["numberValue"] == 5 and apples["key"] == "apples"
    assert isinstance(apples["version"], int) and apples["version"] > 0
    assert set(apples) == {"key", "numberValue", "version"}
    _, greeting, _ = querystate(pulsar_endpoint, name, "greeting")
    assert greeting["stringValue"] == "hello" and set(greeting) == {"key", "stringValue", "version"}
    _, raw, _ = querystate(pulsar_endpoint, name, "raw")
    assert base64.b64decode(raw["byteValue"]) == b"\xff\x00"


def test_querystate_says_not_found_clearly(
    pulsar_endpoint: PulsarEndpoint, function_state: str
) -> None:
    code, _, err = querystate(pulsar_endpoint, function_state, "nope")
    assert code == 3 and "key 'nope' doesn't exist." in err
    # the kit's own bookkeeping is not a state key
    code, _, err = querystate(pulsar_endpoint, function_state, "some-input")
    assert code == 3 and "doesn't exist" in err
    code, _, err = querystate(pulsar_endpoint, unique_name("absent"), "apples")
    assert code == 3 and "doesn't exist" in err and "Function" in err
    code, _, err = querystate(pulsar_endpoint, function_state, "apples", tenant="no-such-tenant")
    assert code == 3 and "doesn't exist" in err


def test_querystate_watch_prints_each_change(
    pulsar_endpoint: PulsarEndpoint, function_state: str, client: Any
) -> None:
    proc = subprocess.Popen(
        [
            *QUERYSTATE,
            "--tenant",
            "public",
            "--namespace",
            "default",
            "--name",
            function_state,
            "--key",
            "apples",
            "--watch",
        ],
        env=_env(pulsar_endpoint),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = _read_json_object(proc.stdout, timeout_s=60)
        assert first["numberValue"] == 5
        topic = default_state_topic("public", "default", function_state)
        with PulsarMap[str, Any](client, topic, admin_url=pulsar_endpoint.admin_url) as state:
            state.put("counter/apples", 6).result(timeout=60)
        second = _read_json_object(proc.stdout, timeout_s=60)
        assert second["numberValue"] == 6 and second["version"] > first["version"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_answers_the_admin_v3_route(
    pulsar_endpoint: PulsarEndpoint, function_state: str, server: str
) -> None:
    base = f"{server}/admin/v3/functions/public/default/{function_state}/state"
    got = requests.get(f"{base}/apples", timeout=60)
    assert got.status_code == 200 and got.headers["Content-Type"] == "application/json"
    assert got.json()["numberValue"] == 5
    missing = requests.get(f"{base}/nope", timeout=60)
    assert missing.status_code == 404
    assert missing.json() == {"reason": "key 'nope' doesn't exist."}
    other = requests.get(
        f"{server}/admin/v3/functions/public/default/{unique_name('absent')}/state/k", timeout=60
    )
    assert other.status_code == 404 and "doesn't exist" in other.json()["reason"]
    # read-only, and only that route
    assert requests.post(f"{base}/apples", json={}, timeout=60).status_code == 405
    assert requests.get(f"{server}/admin/v2/clusters", timeout=60).status_code == 404


def test_the_distributions_pulsar_admin_queries_serve(
    pulsar_endpoint: PulsarEndpoint, function_state: str, server: str
) -> None:
    admin = PulsarAdminCli(admin_url=server)
    fn = ["--tenant", "public", "--namespace", "default", "--name", function_state]
    apples = json.loads(admin.run("functions", "querystate", *fn, "--key", "apples"))
    assert apples["key"] == "apples" and apples["numberValue"] == 5 and apples["version"] > 0
    greeting = json.loads(admin.run("functions", "querystate", *fn, "--key", "greeting"))
    assert greeting["stringValue"] == "hello"
    raw = json.loads(admin.run("functions", "querystate", *fn, "--key", "raw"))
    assert bytes(b & 0xFF for b in raw["byteValue"]) == b"\xff\x00"  # Gson prints byte[]
    with pytest.raises(PulsarStateError) as missing:
        admin.run("functions", "querystate", *fn, "--key", "nope")
    assert "key 'nope' doesn't exist." in str(missing.value)


def test_querystate_takes_pulsar_admins_other_spellings(
    pulsar_endpoint: PulsarEndpoint, function_state: str
) -> None:
    """``--fqfn tenant/namespace/name``, and tenant/namespace defaulting to public/default."""
    for args in (
        ["--fqfn", f"public/default/{function_state}", "-k", "apples"],
        ["--name", function_state, "--key", "apples"],
    ):
        done = subprocess.run(
            [*QUERYSTATE, *args],
            env=_env(pulsar_endpoint),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["numberValue"] == 5
    bad = subprocess.run(
        [*QUERYSTATE, "--fqfn", "only/two", "--key", "apples"],
        env=_env(pulsar_endpoint),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2 and "tenant/namespace/name" in bad.stderr
    assert "Traceback" not in bad.stderr
