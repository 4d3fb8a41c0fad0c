"""When the embedded standalone counts as ready (``StandaloneBroker.is_ready``),
against a local HTTP server answering as its admin API does: each admin call
must answer 200 with what a ready standalone answers, the worker's only when
the functions worker is on."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest
from http_stub import reply_json, serving

from pulsar_state.deploy.standalone import BrokerInfo, StandaloneBroker

READY: dict[str, tuple[int, Any]] = {
    "/admin/v2/clusters": (200, ["standalone"]),
    "/admin/v2/namespaces/public": (200, ["public/default", "public/functions"]),
    "/admin/v2/worker/cluster": (200, [{"workerId": "w"}]),
    "/admin/v3/functions/public/default": (200, []),
}

#: a body that is no JSON (a proxy's error page)
_GARBLED = object()


class _Admin(BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, tuple[int, Any]]] = {}
    asked: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        self.asked.append((self.path, self.headers.get("Authorization")))
        if self.path not in self.answers:
            reply_json(self, 404, {"reason": "not served"})
            return
        status, body = self.answers[self.path]
        if body is _GARBLED:
            data = b"<html>not json</html>"
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            reply_json(self, status, body)

    def log_message(self, *args: object) -> None:
        pass


def _info(admin_url: str, tmp_path: Path, functions: bool) -> BrokerInfo:
    return BrokerInfo(
        pid=1,
        service_url="pulsar://127.0.0.1:1",
        admin_url=admin_url,
        data_dir=str(tmp_path),
        version="4.0.8",
        functions=functions,
        started_at=time.time(),
    )


def _ready(
    tmp_path: Path, answers: dict[str, tuple[int, Any]], *, functions: bool = True
) -> tuple[bool, list[tuple[str, str | None]]]:
    _Admin.answers = answers
    _Admin.asked = []
    broker = StandaloneBroker(data_dir=tmp_path, admin_token="tok")
    with serving(_Admin) as url:
        return broker.is_ready(_info(url, tmp_path, functions)), list(_Admin.asked)


def test_ready_when_every_call_answers_as_a_ready_standalone(tmp_path: Path) -> None:
    ready, asked = _ready(tmp_path, READY)
    assert ready
    assert asked == [(path, "Bearer tok") for path in READY]


def test_without_the_worker_its_calls_are_not_made(tmp_path: Path) -> None:
    answers = {p: a for p, a in READY.items() if "worker" not in p and "v3" not in p}
    ready, asked = _ready(tmp_path, answers, functions=False)
    assert ready
    assert [path for path, _ in asked] == list(answers)


@pytest.mark.parametrize(
    ("path", "answer"),
    [
        ("/admin/v2/clusters", (200, ["other"])),
        ("/admin/v2/clusters", (503, ["standalone"])),
        ("/admin/v2/namespaces/public", (200, ["public/functions"])),
        ("/admin/v2/namespaces/public", (200, _GARBLED)),
        ("/admin/v2/worker/cluster", (200, [])),
        ("/admin/v2/worker/cluster", (404, [{"workerId": "w"}])),
        ("/admin/v3/functions/public/default", (503, [])),
    ],
)
def test_not_ready_while_one_answer_is_not_yet_a_ready_ones(
    tmp_path: Path, path: str, answer: tuple[int, Any]
) -> None:
    ready, asked = _ready(tmp_path, {**READY, path: answer})
    assert not ready
    assert asked[-1][0] == path, "the calls after the first unready answer are not made"


def test_the_functions_list_needs_only_its_200(tmp_path: Path) -> None:
    ready, _ = _ready(tmp_path, {**READY, "/admin/v3/functions/public/default": (200, _GARBLED)})
    assert ready


def test_an_unreachable_admin_api_is_not_ready(tmp_path: Path) -> None:
    broker = StandaloneBroker(data_dir=tmp_path)
    with serving(_Admin) as url:
        pass  # the server is gone: nothing listens on its port any more
    assert not broker.is_ready(_info(url, tmp_path, functions=True))
