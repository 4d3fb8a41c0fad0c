"""An admin call answered 502/503 (not served) is sent again, whatever its method.

Found by the fault suite's slow-and-failing admin API nemesis (issue #25): a
map opened while the admin API answered 503 failed at once, ``creating ...
failed (503 ...)``, because only reads were sent again. A broker loading or
handing over a topic, or a proxy without a broker behind it, answers so
before doing anything. A 500 may come after the call did something: only
reads are sent again after one.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

import pytest
from http_stub import serving

from pulsar_state.cluster.admin import PulsarAdmin
from pulsar_state.errors import StateTopicError


def _handler(first: int, times: int, calls: list[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if self.command == "GET":  # the partitions asked first: not partitioned
                body = b'{"partitions": 0}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            calls.append(self.command)
            status = first if len(calls) <= times else 204
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_PUT(self) -> None:
            self._reply()

        def do_GET(self) -> None:
            self._reply()

        def log_message(self, *_: object) -> None:
            pass

    return Handler


@pytest.mark.parametrize("status", [502, 503])
def test_a_create_answered_not_served_is_sent_again_until_it_is(status: int) -> None:
    calls: list[str] = []
    with serving(_handler(status, 2, calls)) as url:
        admin = PulsarAdmin(url, retry_s=30)
        admin.ensure_topic("persistent://public/default/t")
    assert calls == ["PUT", "PUT", "PUT"]


def test_a_create_answered_500_is_not_sent_again() -> None:
    calls: list[str] = []
    with serving(_handler(500, 5, calls)) as url:
        admin = PulsarAdmin(url, retry_s=30)
        with pytest.raises(StateTopicError, match="500"):
            admin.ensure_topic("persistent://public/default/t")
    assert calls == ["PUT"]
