"""One broker of the local cluster as the harness's ``PulsarEndpoint``, with a token.

Its admin calls follow a broker's redirect hop by hop with the token, by hand
(``requests`` would drop it; the library's own ``ClusterSession`` is what the
tests check, so the tests' setup does not use it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests
from harness import PulsarEndpoint

from pulsar_state.testing import EmbeddedCluster

_REDIRECTS = (301, 302, 303, 307, 308)


@dataclass
class TokenBroker(PulsarEndpoint):
    """Broker ``index`` of a cluster: its URLs and the super-user's token."""

    token: str = ""

    @classmethod
    def of(cls, cluster: EmbeddedCluster, index: int) -> TokenBroker:
        """Broker ``index`` of ``cluster``, with the super-user's token."""
        return cls(
            cluster.service_urls[index],
            cluster.admin_urls[index],
            "cluster",
            token=cluster.superuser_token or "",
        )

    def admin(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = f"{self.admin_url}{path}"
        headers = {"Authorization": f"Bearer {self.token}"}
        for _ in range(5):
            answer = requests.request(
                method, url, headers=headers, timeout=30, allow_redirects=False, **kwargs
            )
            if answer.status_code not in _REDIRECTS:
                break
            url = answer.headers["Location"]
        return answer

    def owner_index(self, cluster: EmbeddedCluster, topic_path: str) -> int:
        """The index of the broker that owns ``persistent/<tenant>/<ns>/<topic>``
        (looked up, which loads it)."""
        found = self.admin("GET", f"/lookup/v2/topic/{topic_path}")
        found.raise_for_status()
        return cluster.admin_urls.index(found.json()["httpUrl"].rstrip("/"))
