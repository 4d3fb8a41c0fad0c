"""``--output json`` on the read commands, and exit code 3 for anything not found, on a real broker.

``map``, ``meta`` and ``functions querystate`` share one option set and one
exit-code table (:mod:`pulsar_state.cli.exit_codes`); text stays the default.
"""

from __future__ import annotations

import json
from typing import Any

import pulsar
from click.testing import CliRunner, Result
from harness import PulsarEndpoint, unique_name, unique_topic

from pulsar_state import PulsarMap
from pulsar_state.cli import main
from pulsar_state.functions.queryable_state import default_state_topic


def _run(ep: PulsarEndpoint, *args: str) -> Result:
    env = {"PULSAR_SERVICE_URL": ep.service_url, "PULSAR_ADMIN_URL": ep.admin_url}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def _ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def test_read_commands_print_json_on_request(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, admin_url: str
) -> None:
    ep = pulsar_endpoint
    topic = unique_topic("cli-json-map")
    with PulsarMap[str, Any](client, topic, admin_url=admin_url) as m:
        m.put_all({"a": {"n": 1}, "b": [1, "two"]}).result(30)
    # map get / ls: text as always, JSON on request
    assert _ok(_run(ep, "map", "--topic", topic, "get", "a")) == '{"n": 1}\n'
    got = _ok(_run(ep, "map", "--topic", topic, "--timeout", "20", "get", "a", "--output", "json"))
    assert json.loads(got) == {"key": "a", "value": {"n": 1}}
    assert _ok(_run(ep, "map", "--topic", topic, "ls")).split() == ["a", "b"]
    assert json.loads(_ok(_run(ep, "map", "--topic", topic, "ls", "--output", "json"))) == [
        "a",
        "b",
    ]

    # meta get (the Stat always in JSON) / ls
    meta = unique_topic("cli-json-meta")
    version = _ok(_run(ep, "meta", "--topic", meta, "--timeout", "20", "put", "/svc/x", "hello"))
    assert _ok(_run(ep, "meta", "--topic", meta, "get", "/svc/x")) == "hello\n"
    shown = json.loads(_ok(_run(ep, "meta", "--topic", meta, "get", "/svc/x", "--output", "json")))
    assert (shown["path"], shown["value"]) == ("/svc/x", "hello")
    assert shown["stat"]["version"] == int(version) and shown["stat"]["ephemeral"] is False
    assert json.loads(_ok(_run(ep, "meta", "--topic", meta, "ls", "/svc", "--output", "json"))) == [
        "x"
    ]

    # functions querystate: indented JSON as always, one line with --output json
    name = unique_name("cli-json-fn")
    with PulsarMap[str, Any](
        client, default_state_topic("public", "default", name), admin_url=admin_url
    ) as state:
        state.put("counter/apples", 5).result(30)
    text = _ok(_run(ep, "functions", "querystate", "--name", name, "--key", "apples"))
    assert len(text.splitlines()) > 1
    line = _ok(
        _run(
            ep,
            "functions",
            "querystate",
            "--name",
            name,
            "--key",
            "apples",
            "--timeout",
            "20",
            "--output",
            "json",
        )
    )
    assert len(line.splitlines()) == 1
    assert json.loads(line) == json.loads(text)
    assert json.loads(line)["numberValue"] == 5


def test_not_found_is_exit_code_3_everywhere(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, admin_url: str
) -> None:
    ep = pulsar_endpoint
    there, missing = unique_topic("cli-nf-there"), unique_topic("cli-nf-missing")
    with PulsarMap[str, Any](client, there, admin_url=admin_url) as m:
        m.put("k", 1).result(30)
    meta = unique_topic("cli-nf-meta")
    _ok(_run(ep, "meta", "--topic", meta, "put", "/a", "v"))
    cases: list[tuple[tuple[str, ...], str]] = [
        (("map", "--topic", missing, "get", "k"), f"topic {missing} does not exist"),
        (("map", "--topic", missing, "ls", "--output", "json"), f"topic {missing} does not exist"),
        (("map", "--topic", there, "get", "nope"), "nope: not found"),
        (("meta", "--topic", missing, "ls"), f"topic {missing} does not exist"),
        (("meta", "--topic", meta, "get", "/nope"), "/nope: not found"),
        (("meta", "--topic", meta, "rm", "/nope"), "/nope"),
        (
            ("functions", "querystate", "--name", unique_name("cli-nf-fn"), "--key", "k"),
            "doesn't exist",
        ),
    ]
    for args, message in cases:
        result = _run(ep, *args)
        assert result.exit_code == 3, (args, result.exit_code, result.output)
        assert result.stdout == "", (args, result.stdout)
        assert result.stderr.startswith("Error: ") and message in result.stderr, (args, result)
        assert len(result.stderr.splitlines()) == 1, (args, result.stderr)
