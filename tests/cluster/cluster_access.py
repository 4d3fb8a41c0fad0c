"""The cluster tier's ways to a local cluster's brokers.

The super-user's bearer header (none without authentication), the broker
that owns a topic, a new topic and the broker that does not own it, and a
map's admin endpoint. A topic-level admin call sent to a broker that does not
own the topic is redirected (307); ``requests`` would drop the token on the
way (another port), so these follow each redirect themselves.
"""

from __future__ import annotations

import logging
from typing import Any

import pulsar
import requests
from harness import unique_topic
from tenacity import Retrying, before_sleep_log, retry_if_result, stop_after_delay, wait_exponential

from pulsar_state.cluster.admin import topic_path
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.testing import EmbeddedCluster

__all__ = ["QUIET", "admin_endpoint", "bearer", "created_on_one", "followed", "owner_index"]

#: the Pulsar client's own log, errors only
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)

#: redirects followed at the most (the load manager's leader, then the owner)
_HOPS = 5

#: answers after which a read is sent again: a broker that is placing or
#: releasing the bundle answers a lookup with 500 "Failed to acquire ownership
#: for namespace bundle" (seen by CI right after a bundle unload), or is not
#: serving yet (502, 503). The library's admin client does the same for reads.
_RETRY_READS = (500, 502, 503)

#: how long a read is sent again (a bundle is placed again within seconds)
_RETRY_S = 60.0

_log = logging.getLogger(__name__)


def bearer(cluster: EmbeddedCluster) -> dict[str, str]:
    """The super-user's ``Authorization`` header, or none without authentication."""
    token = cluster.superuser_token
    return {"Authorization": f"Bearer {token}"} if token else {}


def admin_endpoint(cluster: EmbeddedCluster, broker: int = 0) -> AdminEndpoint:
    """Broker ``broker``'s admin API with the super-user's token (if any).

    Returns:
        The endpoint a map of the tests takes as ``admin=``.
    """
    return AdminEndpoint(url=cluster.admin_urls[broker], headers=bearer(cluster) or None)


def followed(cluster: EmbeddedCluster, method: str, url: str, **kwargs: Any) -> requests.Response:
    """An admin call whose redirects are followed with the super-user's token.

    A read (``GET``) answered with a server error is sent again for up to
    :data:`_RETRY_S` seconds; the last answer is returned either way.
    """
    if method != "GET":
        return _hops(cluster, method, url, **kwargs)
    retrying = Retrying(
        retry=retry_if_result(lambda answer: answer.status_code in _RETRY_READS),
        stop=stop_after_delay(_RETRY_S),
        wait=wait_exponential(multiplier=0.1, max=2.0),
        before_sleep=before_sleep_log(_log, logging.INFO),
        retry_error_callback=lambda state: state.outcome.result(),
    )
    return retrying(_hops, cluster, method, url, **kwargs)


def _hops(cluster: EmbeddedCluster, method: str, url: str, **kwargs: Any) -> requests.Response:
    for _ in range(_HOPS):
        answer = requests.request(
            method, url, headers=bearer(cluster), timeout=60, allow_redirects=False, **kwargs
        )
        if answer.status_code != 307:
            return answer
        url = answer.headers["Location"]
    return answer


def owner_index(cluster: EmbeddedCluster, topic: str) -> int:
    """The index of the broker that owns ``topic``, looked up through broker 0 (which
    places its bundle if no broker owns it).

    Returns:
        0 for broker 0, 1 for broker 1, ...
    """
    lookup = f"{cluster.admin_urls[0]}/lookup/v2/topic/{topic_path(topic)}"
    answer = followed(cluster, "GET", lookup)
    answer.raise_for_status()
    return cluster.admin_urls.index(answer.json()["httpUrl"].rstrip("/"))


def created_on_one(cluster: EmbeddedCluster, prefix: str) -> tuple[str, str]:
    """A new topic and the admin URL of the broker that does NOT own it (two brokers).

    The bundle's owner creates it; a bundle without an owner yet takes two hops
    (the load manager's leader, then the owner it picks).
    """
    topic = unique_topic(prefix)
    created = followed(cluster, "PUT", f"{cluster.admin_urls[0]}/admin/v2/{topic_path(topic)}")
    assert created.status_code in (200, 204), created.text
    return topic, cluster.admin_urls[1 - owner_index(cluster, topic)]
