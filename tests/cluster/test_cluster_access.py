"""The tier's admin helper sends a read again while a broker answers 500.

CI failed both bundle-move runs at stop 35: right after a bundle unload, the
owner lookup was answered ``500 Failed to acquire ownership for namespace
bundle`` (the bundle was being placed again) and the test stopped there,
while the writers were fine. A lookup is a read; the library's admin client
sends reads again after a 500, and so does :func:`cluster_access.followed`.
These run on a local HTTP stub, no broker.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler
from types import SimpleNamespace
from typing import cast

from cluster_access import followed, owner_index
from http_stub import reply_json, serving

from pulsar_state.testing import EmbeddedCluster


class _Placing(BaseHTTPRequestHandler):
    """Answers the first two requests of any method with 500 (a bundle being
    placed), then a lookup with broker 0 as the owner."""

    calls = 0
    lock = threading.Lock()

    def _answer(self) -> None:
        with _Placing.lock:
            _Placing.calls += 1
            calls = _Placing.calls
        if calls <= 2:
            reply_json(self, 500, {"reason": "Failed to acquire ownership for namespace bundle"})
            return
        reply_json(self, 200, {"httpUrl": self.server_url})

    do_GET = _answer  # noqa: N815 (http.server's naming)
    do_PUT = _answer  # noqa: N815

    server_url = ""

    def log_message(self, format: str, *args: object) -> None:
        pass


def _cluster(url: str) -> EmbeddedCluster:
    return cast(EmbeddedCluster, SimpleNamespace(admin_urls=[url], superuser_token=None))


def test_a_lookup_answered_500_while_the_bundle_is_placed_is_sent_again() -> None:
    _Placing.calls = 0
    with serving(_Placing) as url:
        _Placing.server_url = url
        assert owner_index(_cluster(url), "persistent://public/default/t") == 0
    assert _Placing.calls == 3


def test_a_write_answered_500_is_not_sent_again() -> None:
    _Placing.calls = 0
    with serving(_Placing) as url:
        answer = followed(_cluster(url), "PUT", f"{url}/admin/v2/persistent/public/default/t")
    assert answer.status_code == 500
    assert _Placing.calls == 1
