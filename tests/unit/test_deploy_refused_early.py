"""``pulsar-state deploy`` asks the cluster before it builds anything.

Building the four function packages (pip, per function) is the slow part of a
deploy. A cluster that refuses the deploy (a wrong token, no permission, no
functions worker) must say so at once, not after every package is built.
Run through the CLI as a user types it, against a local server answering as
such an admin API does."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import pytest
from click.testing import CliRunner
from http_stub import serving

from pulsar_state.cli import main
from pulsar_state.deploy import functions_deploy


class _Refusing(BaseHTTPRequestHandler):
    """An admin API that refuses this client's role everything."""

    requests: ClassVar[list[str]] = []

    def _refuse(self) -> None:
        type(self).requests.append(f"{self.command} {self.path}")
        body = json.dumps({"reason": "Role anonymous is not authorized"}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._refuse()

    def do_POST(self) -> None:
        self._refuse()

    def do_PUT(self) -> None:
        self._refuse()

    def do_DELETE(self) -> None:
        self._refuse()

    def log_message(self, *_: object) -> None:
        pass


def test_a_refused_deploy_fails_before_any_package_is_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    built: list[str] = []

    def build(*, name: str, out_dir: Path, **_: object) -> Path:
        built.append(name)
        path = out_dir / f"{name}.zip"
        path.write_bytes(b"PK\x05\x06" + b"\0" * 18)
        return path

    monkeypatch.setattr(functions_deploy, "build_function_package", build)
    _Refusing.requests = []
    with serving(_Refusing) as url:
        result = CliRunner().invoke(main, ["deploy", "--admin-url", url, "--wait-s", "0"])
    assert result.exit_code != 0, result.output
    assert "401" in result.output or "not authorized" in result.output, result.output
    assert _Refusing.requests, "the cluster was never asked"
    assert built == [], f"packages built before the refusal: {built}"
