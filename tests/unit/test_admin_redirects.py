"""A broker's redirect to the topic's owner is followed with the caller's
credentials, and only to a broker of the same cluster (issue #27).

On a cluster with token authentication, a topic-level admin call sent to a
broker that does not own the topic is answered with 307 to the owner;
``requests`` followed it without the ``Authorization`` header (its host or
port differs) and the owner answered 401: every admin call the library
makes failed through the non-owner. Here two local HTTP servers play the
non-owner and the owner; ``localhost`` and ``127.0.0.1`` are two hosts.
The same is proven on a real two-broker cluster in tests/cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
import requests
from http_stub import serving

from pulsar_state.cluster.admin import PulsarAdmin
from pulsar_state.cluster.session import ClusterSession
from pulsar_state.errors import AdminUnreachableError, PermissionDeniedError, StateTopicError

TOKEN = "Bearer good-token"
TOPIC = "persistent://public/default/t"
STATS = "/admin/v2/persistent/public/default/t/stats"
Reply = tuple[int, dict[str, str], Any]


@dataclass
class Broker:
    """A stub broker: ``routes`` answer (path -> reply); every request is recorded."""

    routes: dict[str, Callable[[Broker, str], Reply]] = field(default_factory=dict)
    seen: list[tuple[str, str, str | None, bytes]] = field(default_factory=list)
    url: str = ""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        broker = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?")[0]
                broker.seen.append((self.command, path, self.headers.get("Authorization"), body))
                route = broker.routes.get(path)
                status, headers, payload = (
                    (404, {}, {"reason": "no such path"}) if route is None else route(broker, path)
                )
                data = json.dumps(payload).encode() if payload is not None else b""
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._reply()

            def do_POST(self) -> None:
                self._reply()

            def log_message(self, *_: object) -> None:
                pass

        return Handler


def redirect_to(target: Callable[[], str]) -> Callable[[Broker, str], Reply]:
    return lambda _b, path: (307, {"Location": f"{target()}{path}?authoritative=false"}, None)


def needs_token(payload: Any) -> Callable[[Broker, str], Reply]:
    def answer(broker: Broker, _path: str) -> Reply:
        if broker.seen[-1][2] != TOKEN:
            return 401, {}, {"reason": "Authentication required"}
        return 200, {}, payload

    return answer


def listing(*brokers: str, status: int = 200) -> dict[str, Callable[[Broker, str], Reply]]:
    return {
        "/admin/v2/clusters": lambda _b, _p: (status, {}, ["c1"]),
        "/admin/v2/brokers/c1": lambda _b, _p: (status, {}, list(brokers)),
    }


@pytest.fixture
def two() -> Iterator[tuple[Broker, Broker]]:
    """The non-owner (front) and the owner, both on 127.0.0.1."""
    front, owner = Broker(), Broker()
    with ExitStack() as stack:
        front.url = stack.enter_context(serving(front.handler()))
        owner.url = stack.enter_context(serving(owner.handler()))
        yield front, owner


def _admin(url: str, **kwargs: Any) -> PulsarAdmin:
    return PulsarAdmin(url, headers={"Authorization": TOKEN}, retry_s=1.0, **kwargs)


def _as_localhost(url: str) -> str:
    return url.replace("127.0.0.1", "localhost")


def test_a_redirect_to_another_broker_on_the_same_host_keeps_the_token(
    two: tuple[Broker, Broker],
) -> None:
    front, owner = two
    front.routes[STATS] = redirect_to(lambda: owner.url)
    owner.routes[STATS] = needs_token({"msgInCounter": 7})
    assert _admin(front.url).stats(TOPIC)["msgInCounter"] == 7
    assert owner.seen == [("GET", STATS, TOKEN, b"")]


def test_without_keeping_the_token_the_owner_refuses(two: tuple[Broker, Broker]) -> None:
    """What the library did before: requests' own redirect handling."""
    front, owner = two
    front.routes[STATS] = redirect_to(lambda: owner.url)
    owner.routes[STATS] = needs_token({})
    plain = requests.get(front.url + STATS, headers={"Authorization": TOKEN}, timeout=5)
    assert plain.status_code == 401
    assert owner.seen[-1][2] is None  # the header was dropped on the way


def test_a_write_is_sent_again_with_its_method_and_body(two: tuple[Broker, Broker]) -> None:
    front, owner = two
    path = "/admin/v2/persistent/public/default/t/retention"
    front.routes[path] = redirect_to(lambda: owner.url)
    owner.routes[path] = needs_token(None)
    resp = _admin(front.url).request("POST", path, json={"retentionTimeInMinutes": -1})
    assert resp.status_code == 200
    method, _, auth, body = owner.seen[-1]
    assert (method, auth) == ("POST", TOKEN)
    assert json.loads(body) == {"retentionTimeInMinutes": -1}


def test_a_host_the_cluster_lists_as_a_broker_is_followed(two: tuple[Broker, Broker]) -> None:
    front, owner = two
    owner_elsewhere = _as_localhost(owner.url)
    front.routes.update(listing(owner_elsewhere.removeprefix("http://"), "127.0.0.1:1"))
    front.routes[STATS] = redirect_to(lambda: owner_elsewhere)
    owner.routes[STATS] = needs_token({"msgInCounter": 3})
    assert _admin(front.url).stats(TOPIC)["msgInCounter"] == 3
    assert owner.seen[-1][2] == TOKEN
    listed = [(m, p, a) for m, p, a, _ in front.seen if p.startswith("/admin/v2/clusters")]
    assert listed == [("GET", "/admin/v2/clusters", TOKEN)]  # asked with the credentials


@pytest.mark.parametrize("status", [200, 403], ids=["not-listed", "listing-refused"])
def test_a_host_that_is_not_a_broker_of_the_cluster_gets_nothing(
    two: tuple[Broker, Broker], status: int
) -> None:
    front, owner = two
    front.routes.update(listing("127.0.0.1:1", status=status))
    stranger = _as_localhost(owner.url)
    front.routes[STATS] = redirect_to(lambda: stranger)
    owner.routes[STATS] = needs_token({})
    with pytest.raises(StateTopicError, match=f"redirected GET {STATS} to {stranger}"):
        _admin(front.url).stats(TOPIC)
    assert owner.seen == []  # not even without the token


def test_a_redirect_loop_is_not_served_and_ends(two: tuple[Broker, Broker]) -> None:
    front, owner = two
    front.routes[STATS] = redirect_to(lambda: owner.url)
    owner.routes[STATS] = redirect_to(lambda: front.url)
    with pytest.raises(AdminUnreachableError, match="redirected in a loop"):
        _admin(front.url).stats(TOPIC)


def test_the_error_names_the_broker_that_refused(two: tuple[Broker, Broker]) -> None:
    front, owner = two
    front.routes[STATS] = redirect_to(lambda: owner.url)
    owner.routes[STATS] = lambda _b, _p: (403, {}, {"reason": "Don't have permission"})
    with pytest.raises(PermissionDeniedError, match=f"403 from the broker at {owner.url}"):
        _admin(front.url).stats(TOPIC)


@pytest.mark.parametrize(
    ("old", "new", "follows"),
    [
        ("https://a.example:8443/x", "http://a.example:8080/x", False),  # never in the clear
        ("http://a.example:8080/x", "https://a.example:8443/x", True),
        ("http://a.example:8080/x", "http://A.EXAMPLE:8081/x", True),  # hosts ignore case
        ("http://a.example:8080/x", "http://b.example:8080/x", False),
        ("http://a.example:8080/x", "ftp://a.example/x", False),
    ],
)
def test_the_rule(old: str, new: str, follows: bool) -> None:
    session = ClusterSession("http://a.example:8080", list_brokers=False)
    assert session.may_follow(old, new) is follows
    assert session.should_strip_auth(old, new) is not follows
