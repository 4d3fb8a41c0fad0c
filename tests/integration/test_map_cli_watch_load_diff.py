"""``pulsar-state map watch|load|diff`` (issue #17 item 4) against the real broker.

``load`` restores what ``dump`` writes (the roundtrip equals the source),
``diff`` compares two topics or one topic at two positions, ``watch`` prints
every change in order. Wrong input is a clear message and a nonzero exit code,
never a traceback. The short commands run in-process through click's
CliRunner; ``watch`` runs as a user runs it, a process of the entry point.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulsar
import pytest
from click.testing import CliRunner, Result
from harness import PulsarEndpoint, unique_topic

from pulsar_state import PulsarMap
from pulsar_state.cli import main

ENTRY_POINT = str(Path(sys.executable).parent / "pulsar-state")


def _env(ep: PulsarEndpoint) -> dict[str, str]:
    return {"PULSAR_SERVICE_URL": ep.service_url, "PULSAR_ADMIN_URL": ep.admin_url}


def _run(ep: PulsarEndpoint, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=_env(ep), input=input, catch_exceptions=False)


def _no_traceback(result: Result) -> None:
    assert "Traceback" not in result.output, result.output


def _fill(client: pulsar.Client, topic: str, admin_url: str, entries: dict[str, Any]) -> None:
    with PulsarMap[str, Any](client, topic, admin_url=admin_url) as m:
        m.put_all(entries).result(30)


def test_load_after_dump_equals_the_source(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, admin_url: str, tmp_path: Path
) -> None:
    source, copy = unique_topic("load-src"), unique_topic("load-dst")
    entries: dict[str, Any] = {
        f"k{i:03d}": {"n": i, "tags": ["a", "b"][: i % 3], "s": "é" * (i % 4)} for i in range(300)
    }
    entries.update({"null": None, "zero": 0, "text": "plain", "list": [1, [2, {"x": None}]]})
    _fill(client, source, admin_url, entries)
    dump = tmp_path / "dump.jsonl"
    done = _run(pulsar_endpoint, "map", "--topic", source, "dump", "--output", str(dump))
    assert done.exit_code == 0, done.output
    loaded = _run(pulsar_endpoint, "map", "load", copy, str(dump))
    assert loaded.exit_code == 0, loaded.output
    assert f"{len(entries)} entries" in loaded.output
    with PulsarMap[str, Any](client, copy, admin_url=admin_url) as m:
        assert m.items(latest=True).result(30) == entries
    # both ways: dump of the copy is byte for byte the source's dump
    again = tmp_path / "again.jsonl"
    assert _run(pulsar_endpoint, "map", "--topic", copy, "dump", "-o", str(again)).exit_code == 0
    assert again.read_text() == dump.read_text()
    # diff says they are equal
    same = _run(pulsar_endpoint, "map", "diff", source, copy)
    assert same.exit_code == 0 and same.output.strip().endswith("0 differences"), same.output


def test_load_replace_makes_the_topic_equal_and_bad_files_write_nothing(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, admin_url: str, tmp_path: Path
) -> None:
    topic = unique_topic("load-replace")
    _fill(client, topic, admin_url, {"stale": 1, "kept": 2})
    good = tmp_path / "good.jsonl"
    good.write_text('{"key": "kept", "value": 20}\n{"key": "new", "value": [3]}\n')
    merged = _run(pulsar_endpoint, "map", "load", topic, str(good))
    assert merged.exit_code == 0, merged.output
    with PulsarMap[str, Any](client, topic, admin_url=admin_url) as m:
        assert m.items(latest=True).result(30) == {"stale": 1, "kept": 20, "new": [3]}
    replaced = _run(pulsar_endpoint, "map", "load", topic, str(good), "--replace")
    assert replaced.exit_code == 0 and "1 deleted" in replaced.output, replaced.output
    bad_lines = {
        "not json": 'not json\n{"key": "a", "value": 1}\n',
        "no key": '{"key": "a", "value": 1}\n{"value": 1}\n',
        "reserved": '{"key": "__pss__/x", "value": 1}\n',
        "twice": '{"key": "a", "value": 1}\n{"key": "a", "value": 2}\n',
        "not an object": "[1, 2]\n",
    }
    for name, text in bad_lines.items():
        bad = tmp_path / f"{name.replace(' ', '-')}.jsonl"
        bad.write_text(text)
        result = _run(pulsar_endpoint, "map", "load", topic, str(bad), "--replace")
        assert result.exit_code == 1, (name, result.output)
        assert "line" in result.output and str(bad) in result.output, (name, result.output)
        _no_traceback(result)
    missing = _run(pulsar_endpoint, "map", "load", topic, str(tmp_path / "absent.jsonl"))
    assert missing.exit_code == 2 and "No such file" in missing.output, missing.output
    with PulsarMap[str, Any](client, topic, admin_url=admin_url) as m:
        assert m.items(latest=True).result(30) == {"kept": 20, "new": [3]}, "a bad file wrote"


def test_diff_two_topics_and_one_topic_at_two_positions(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, admin_url: str
) -> None:
    a, b = unique_topic("diff-a"), unique_topic("diff-b")
    _fill(client, a, admin_url, {"same": 1, "changed": "old", "only-a": True})
    _fill(client, b, admin_url, {"same": 1, "changed": "new", "only-b": [1]})
    text = _run(pulsar_endpoint, "map", "diff", a, b)
    assert text.exit_code == 1, text.output  # they differ: exit 1, as diff
    lines = text.output.splitlines()
    assert lines[:3] == [
        '~ changed: "old" -> "new"',
        "- only-a: true",
        "+ only-b: [1]",
    ]
    assert lines[3] == "3 differences"
    as_json = _run(pulsar_endpoint, "map", "diff", a, b, "--format", "json")
    assert [json.loads(line) for line in as_json.output.splitlines()] == [
        {"key": "changed", "change": "changed", "a": "old", "b": "new"},
        {"key": "only-a", "change": "removed", "a": True},
        {"key": "only-b", "change": "added", "b": [1]},
    ]
    # one topic at two positions
    with PulsarMap[str, Any](client, a, admin_url=admin_url) as m:
        p1 = m.put("later", 1).result(30)
        m.delete("same").result(30)
        p2 = m.put("later", 2).result(30)
    at = _run(pulsar_endpoint, "map", "diff", f"{a}@{p1}", f"{a}@{p2}")
    assert at.exit_code == 1, at.output
    assert at.output.splitlines() == ["~ later: 1 -> 2", "- same: 1", "2 differences"]
    # the latest equals the last position
    same = _run(pulsar_endpoint, "map", "diff", f"{a}@{p2}", a)
    assert (same.exit_code, same.output.strip()) == (0, "0 differences"), same.output


def test_wrong_input_is_a_clear_message_and_an_exit_code(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, admin_url: str
) -> None:
    there, missing = unique_topic("diff-there"), unique_topic("diff-missing")
    _fill(client, there, admin_url, {"k": 1})
    cases: list[tuple[tuple[str, ...], int, str]] = [
        (("map", "diff", there, missing), 3, f"topic {missing} does not exist"),
        (("map", "diff", f"{there}@not-a-position", there), 2, "not a position"),
        (("map", "diff", f"{there}@999999:0:-1", there), 1, "before position"),
        (("map", "watch", missing, "--count", "1"), 3, f"topic {missing} does not exist"),
        (("map", "watch", there, "--from", "x:y"), 2, "not a position"),
        (("map", "watch", there, "--key", "__pss__/k"), 2, "reserved"),
        (("map", "diff", "bad//name", there), 2, "topic"),
        (("map", "get", "k"), 2, "--topic"),
    ]
    for args, code, message in cases:
        result = _run(pulsar_endpoint, *args)
        assert result.exit_code == code, (args, result.exit_code, result.output)
        assert message in result.output, (args, result.output)
        _no_traceback(result)


def _watch(ep: PulsarEndpoint, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [ENTRY_POINT, "map", "watch", *args],
        env={**os.environ, **_env(ep)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_watch_prints_every_change_in_order(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, admin_url: str
) -> None:
    topic = unique_topic("cli-watch")
    with PulsarMap[str, Any](client, topic, admin_url=admin_url) as m:
        start = m.put("a/0", 0).result(30)
        m.put("b/0", 0).result(30)
        history = _watch(
            pulsar_endpoint,
            *(topic, "--prefix", "a/", "--from", str(start), "--count", "41", "--format", "json"),
        )
        live = _watch(pulsar_endpoint, topic, "--key", "a/1", "--count", "3", "--duration", "120")
        try:
            # the live watch prints "watching" on stderr once caught up: only then write
            assert live.stderr is not None
            ready, _, _ = select.select([live.stderr], [], [], 60)
            assert ready, "the live watch did not start within 60 s"
            line = live.stderr.readline()
            assert "watching" in line, line
            for i in range(1, 41):
                m.put(f"a/{i % 3}", i).result(30)
                m.put(f"b/{i % 3}", i).result(30)
            m.delete("a/1").result(30)
            out, err = history.communicate(timeout=120)
            assert history.returncode == 0, err
            changes = [json.loads(line) for line in out.splitlines()]
            expected_keys = [f"a/{i % 3}" for i in range(1, 41)] + ["a/1"]
            assert [c["key"] for c in changes] == expected_keys
            assert [c["value"] for c in changes[:40]] == list(range(1, 41))
            assert changes[-1] == {**changes[-1], "op": "delete", "value": None, "old_value": 40}
            assert changes[0]["old_value"] is None and changes[3]["old_value"] == 1
            positions = [tuple(int(p) for p in c["position"].split(":")) for c in changes]
            assert positions == sorted(positions) and len(set(positions)) == 41
            out, err = live.communicate(timeout=120)
            assert live.returncode == 0, err
            assert [line.split(" ", 1)[1] for line in out.splitlines()] == [
                "a/1 = 1",
                "a/1 = 4 (was 1)",
                "a/1 = 7 (was 4)",
            ]
        finally:
            for p in (history, live):
                if p.poll() is None:
                    p.kill()
                    p.wait(10)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_watch_duration_ends_quietly(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, admin_url: str, fmt: str
) -> None:
    topic = unique_topic("cli-watch-quiet")
    _fill(client, topic, admin_url, {"k": 1})
    result = _run(pulsar_endpoint, "map", "watch", topic, "--duration", "1", "--format", fmt)
    assert result.exit_code == 0 and result.stdout.strip() == "", result.output
    assert "watching" in result.stderr
