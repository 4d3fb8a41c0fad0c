"""The CLI's read commands change nothing on the cluster (issue #15, item 5).

``map get|ls|dump`` and ``meta get|ls|watch`` read the topic with a Reader:
no topic creation, no retention or other policy write, no producer, no
durable subscription. A missing topic is a clear message and exit code 3.
Run as a user runs them: the installed ``pulsar-state`` entry point, a
process per command, against the real broker.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_topic

from pulsar_state import MetadataStore, PulsarMap
from pulsar_state.cluster.admin import topic_path

ENTRY_POINT = str(Path(sys.executable).parent / "pulsar-state")
# a retention no state manager would ever set: a write by a read shows as a change
MARKED_RETENTION = {"retentionTimeInMinutes": 12345, "retentionSizeInMB": -1}


def _env(ep: PulsarEndpoint) -> dict[str, str]:
    return {**os.environ, "PULSAR_SERVICE_URL": ep.service_url, "PULSAR_ADMIN_URL": ep.admin_url}


def _cli(ep: PulsarEndpoint, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENTRY_POINT, *args],
        env=_env(ep),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _read_missing(
    ep: PulsarEndpoint, group: str, topic: str, command: tuple[str, ...]
) -> subprocess.CompletedProcess[str]:
    """``pulsar-state GROUP --topic TOPIC COMMAND`` on a missing topic: exit code 3,
    a clear message, and the topic still missing."""
    done = _cli(ep, group, "--topic", topic, *command)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert f"topic {topic} does not exist" in done.stderr
    assert "Traceback" not in done.stderr
    assert not _exists(ep, topic), "a read created the topic"
    return done


def _topics(ep: PulsarEndpoint) -> list[str]:
    resp = ep.admin("GET", "/admin/v2/persistent/public/default")
    assert resp.status_code == 200, resp.text
    return list(resp.json())


def _exists(ep: PulsarEndpoint, topic: str) -> bool:
    return topic in _topics(ep) or ep.admin("GET", f"/admin/v2/{topic_path(topic)}/stats").ok


def _topic_retention(ep: PulsarEndpoint, topic: str) -> Any:
    resp = ep.admin("GET", f"/admin/v2/{topic_path(topic)}/retention")
    assert resp.status_code == 200, resp.text
    return resp.json() if resp.text else None


def _set_retention(ep: PulsarEndpoint, topic: str) -> None:
    resp = ep.admin("POST", f"/admin/v2/{topic_path(topic)}/retention", json=MARKED_RETENTION)
    assert resp.status_code in (200, 204), resp.text
    # topic policies go through the namespace's system topic: wait until readable
    deadline = time.monotonic() + 30
    while _topic_retention(ep, topic) != MARKED_RETENTION:
        assert time.monotonic() < deadline, "the marked retention was not readable within 30 s"
        time.sleep(0.2)


def _subscriptions(ep: PulsarEndpoint, topic: str) -> dict[str, Any]:
    stats = ep.admin("GET", f"/admin/v2/{topic_path(topic)}/stats")
    assert stats.status_code == 200, stats.text
    return dict(stats.json().get("subscriptions", {}))


def _assert_unchanged(ep: PulsarEndpoint, topic: str, subscriptions: dict[str, Any]) -> None:
    """The marked retention and the subscriptions are as they were before the reads."""
    assert _topic_retention(ep, topic) == MARKED_RETENTION
    assert _subscriptions(ep, topic).keys() == subscriptions.keys()


@pytest.fixture
def map_topic(pulsar_endpoint: PulsarEndpoint, client: pulsar.Client) -> Iterator[str]:
    """A map topic holding two keys, written (and protected) by a PulsarMap."""
    topic = unique_topic("cli-ro-map")
    with PulsarMap[str, Any](client, topic, admin_url=pulsar_endpoint.admin_url) as m:
        m.put_all({"a": {"x": 1}, "b": [1, 2]}).result(30)
        m.delete("a").result(30)
        m.put("a", 7).result(30)
    yield topic


@pytest.mark.parametrize("command", [("get", "k"), ("ls",), ("dump",)], ids=["get", "ls", "dump"])
def test_map_read_of_a_missing_topic_says_so_and_creates_nothing(
    pulsar_endpoint: PulsarEndpoint, command: tuple[str, ...]
) -> None:
    topic = unique_topic("cli-ro-missing")
    done = _read_missing(pulsar_endpoint, "map", topic, command)
    assert done.stdout == ""
    retention = pulsar_endpoint.admin("GET", f"/admin/v2/{topic_path(topic)}/retention")
    assert retention.status_code == 404 or not retention.text, retention.text


@pytest.mark.parametrize(
    "command",
    [("get", "/a"), ("ls", "/"), ("watch", "--count", "1")],
    ids=["get", "ls", "watch"],
)
def test_meta_read_of_a_missing_topic_says_so_and_creates_nothing(
    pulsar_endpoint: PulsarEndpoint, command: tuple[str, ...]
) -> None:
    topic = unique_topic("cli-ro-missing-meta")
    _read_missing(pulsar_endpoint, "meta", topic, command)
    assert not _exists(pulsar_endpoint, f"{topic}-pss-sessions"), "a read made a session"


def test_map_reads_change_no_policy_and_leave_no_subscription(
    pulsar_endpoint: PulsarEndpoint, map_topic: str, tmp_path: Path
) -> None:
    _set_retention(pulsar_endpoint, map_topic)
    before = _subscriptions(pulsar_endpoint, map_topic)

    got = _cli(pulsar_endpoint, "map", "--topic", map_topic, "get", "a")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == 7
    absent = _cli(pulsar_endpoint, "map", "--topic", map_topic, "get", "nope")
    assert absent.returncode == 3
    assert "nope: not found" in absent.stderr
    listed = _cli(pulsar_endpoint, "map", "--topic", map_topic, "ls")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["a", "b"]
    out = tmp_path / "dump.jsonl"
    dumped = _cli(pulsar_endpoint, "map", "--topic", map_topic, "dump", "-o", str(out))
    assert dumped.returncode == 0, dumped.stderr
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"key": "a", "value": 7},
        {"key": "b", "value": [1, 2]},
    ]

    _assert_unchanged(pulsar_endpoint, map_topic, before)


def test_meta_reads_change_no_policy(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client
) -> None:
    topic = unique_topic("cli-ro-meta")
    with MetadataStore(client, topic, admin_url=pulsar_endpoint.admin_url) as store:
        store.put("/svc/a", b"one", -1).result(30)
        store.put("/svc/b", b"\xff\x00", -1).result(30)
    _set_retention(pulsar_endpoint, topic)
    before = _subscriptions(pulsar_endpoint, topic)

    got = _cli(pulsar_endpoint, "meta", "--topic", topic, "get", "/svc/a", "--stat")
    assert got.returncode == 0, got.stderr
    value, stat = got.stdout.splitlines()
    assert value == "one"
    assert json.loads(stat)["version"] == 0
    binary = _cli(pulsar_endpoint, "meta", "--topic", topic, "get", "/svc/b")
    assert binary.stdout.strip() == "base64:/wA="
    absent = _cli(pulsar_endpoint, "meta", "--topic", topic, "get", "/svc/none")
    assert absent.returncode == 3
    assert "/svc/none: not found" in absent.stderr
    children = _cli(pulsar_endpoint, "meta", "--topic", topic, "ls", "/svc")
    assert children.returncode == 0, children.stderr
    assert children.stdout.split() == ["a", "b"]

    _assert_unchanged(pulsar_endpoint, topic, before)


def test_meta_watch_prints_new_changes_and_writes_nothing(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client
) -> None:
    topic = unique_topic("cli-ro-watch")
    with MetadataStore(client, topic, admin_url=pulsar_endpoint.admin_url) as store:
        store.put("/old", b"1", -1).result(30)
        _set_retention(pulsar_endpoint, topic)
        watcher = subprocess.Popen(
            [ENTRY_POINT, "meta", "--topic", topic, "watch", "--prefix", "/new", "--count", "2"],
            env=_env(pulsar_endpoint),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # the watcher prints "watching" on stderr once it has caught up
            assert watcher.stderr is not None
            ready = select.select([watcher.stderr], [], [], 60)[0]
            assert ready, "the watcher did not say it was watching within 60 s"
            line = watcher.stderr.readline()
            assert "watching" in line, line
            store.put("/new/x", b"2", -1).result(30)
            out, err = watcher.communicate(timeout=60)
        finally:
            if watcher.poll() is None:
                watcher.kill()
                watcher.wait(timeout=10)
    assert watcher.returncode == 0, err
    # history (/old) is not news; the two notes of the new node are
    assert out.splitlines() == ["created /new/x", "children_changed /new"]
    assert _topic_retention(pulsar_endpoint, topic) == MARKED_RETENTION


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("map", "get", "k"), "Missing option '--topic'"),
        (("map", "--topic", "t", "get"), "Missing argument 'KEY'"),
        (("map", "--topic", "t", "put", "k", "{not json"), "not JSON"),
        (("map", "--topic", "t", "get", "__pss__/commit"), "reserved"),
        (("map", "--topic", "a/b", "get", "k"), "persistent://tenant/namespace/name"),
        (("meta", "--topic", "t", "get", "no-slash"), "a path starts with '/'"),
        (("meta", "ls"), "Missing option '--topic'"),
    ],
    ids=[
        "no-topic",
        "no-key",
        "bad-json",
        "reserved-key",
        "bad-topic",
        "bad-path",
        "meta-no-topic",
    ],
)
def test_bad_input_is_a_usage_error(
    pulsar_endpoint: PulsarEndpoint, args: tuple[str, ...], message: str
) -> None:
    done = _cli(pulsar_endpoint, *args)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert message in done.stderr
    assert "Traceback" not in done.stderr
