"""``bin/pulsar-admin`` driven from Python keeps secrets off its command line.

Any user of a machine can read the arguments of its processes (``ps``). The
distribution's real ``pulsar-admin`` is run here with a token (and a basic
password): while it runs, no process's command line holds the secret, the
file that does is private (0600, in a 0700 directory) and is gone afterwards,
and the admin API still receives the credentials (checked on the shared broker,
and on a local HTTP endpoint that records the ``Authorization`` header the tool
sends, since the shared broker does not authenticate).
"""

from __future__ import annotations

import base64
import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from harness import PulsarEndpoint

from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli

#: shaped like a JWT; the shared broker does not check it
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzZWNyZXQtcm9sZSJ9.c2VjcmV0LXNpZ25hdHVyZS00MjQy"


def _admin_tool_processes() -> dict[int, tuple[str, dict[str, str]]]:
    """pid -> (command line, environment) of the running pulsar-admin JVMs."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if "PulsarAdminTool" not in cmdline:
                continue
            raw = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        env = dict(item.decode().partition("=")[::2] for item in raw if b"=" in item)
        found[int(entry.name)] = (cmdline, env)
    return found


def test_a_token_is_on_no_command_line_while_pulsar_admin_runs(
    pulsar_endpoint: PulsarEndpoint,
) -> None:
    admin = PulsarAdminCli(
        admin_url=pulsar_endpoint.admin_url, auth=ClusterAuth(auth_token=TOKEN), timeout_s=120
    )
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["out"] = admin.run("tenants", "list")
        except Exception as exc:  # reported below
            result["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    seen: dict[int, tuple[str, dict[str, str]]] = {}
    conf_files: dict[str, tuple[int, int, str]] = {}
    while worker.is_alive():  # bounded by the run's own 120 s timeout
        for pid, (cmdline, env) in _admin_tool_processes().items():
            seen[pid] = (cmdline, env)
            conf = env.get("PULSAR_CLIENT_CONF")
            if conf and conf not in conf_files:
                try:
                    mode = stat.S_IMODE(os.stat(conf).st_mode)
                    dir_mode = stat.S_IMODE(os.stat(Path(conf).parent).st_mode)
                    conf_files[conf] = (mode, dir_mode, Path(conf).read_text())
                except OSError:
                    pass  # the run ended between the two looks
        time.sleep(0.05)
    worker.join(timeout=5)
    assert "error" not in result, result.get("error")
    assert "public" in str(result["out"])
    assert seen, "no pulsar-admin JVM was seen while the command ran"
    for cmdline, _env in seen.values():
        assert TOKEN not in cmdline, f"the token is on pulsar-admin's command line: {cmdline}"
        assert "--auth-params" not in cmdline
    assert conf_files, "pulsar-admin ran without a private client config"
    for conf, (mode, dir_mode, text) in conf_files.items():
        assert (mode, dir_mode) == (0o600, 0o700), (conf, oct(mode), oct(dir_mode))
        assert f"authParams=token:{TOKEN}" in text
        assert not Path(conf).exists() and not Path(conf).parent.exists()


class _Recorder(BaseHTTPRequestHandler):
    """Answers ``GET /admin/v2/tenants`` as the admin API does; records the auth header."""

    headers_seen: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        type(self).headers_seen.append(self.headers.get("Authorization"))
        body = json.dumps(["public"]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[str | None]]]:
    seen: list[str | None] = []
    handler = type("Recorder", (_Recorder,), {"headers_seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("auth", "expected"),
    [
        (ClusterAuth(auth_token=TOKEN), f"Bearer {TOKEN}"),
        (
            ClusterAuth(
                auth_plugin="basic",
                auth_params=json.dumps({"userId": "ops", "password": "p@ss:w=rd\\x é"}),
            ),
            "Basic " + base64.b64encode("ops:p@ss:w=rd\\x é".encode()).decode(),
        ),
    ],
    ids=["token", "basic"],
)
def test_pulsar_admin_sends_the_credentials_from_the_private_file(
    recorder: tuple[str, list[str | None]], auth: ClusterAuth, expected: str
) -> None:
    url, seen = recorder
    admin = PulsarAdminCli(admin_url=url, auth=auth, timeout_s=120)
    assert "public" in admin.run("tenants", "list")
    assert seen and seen[0] == expected
