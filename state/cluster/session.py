"""The HTTP session of every admin call: it follows a broker's redirect to the
topic's owner with the caller's credentials, but only within the cluster.

A Pulsar broker answers a topic-level admin call (stats, internal stats,
compaction, last message id, topic policies, creation of a topic whose bundle
it does not own) with ``307 Temporary Redirect`` to the broker that owns the
topic. ``requests`` follows redirects but drops the ``Authorization`` header
whenever the host or the port changes (``Session.should_strip_auth``): on a
cluster with authentication every such call then fails with 401 at the owner,
although the caller's token was good. Pulsar's own admin client keeps its
credentials on a redirect.

:class:`ClusterSession` keeps them too, and only where they belong:

- a redirect is followed with the credentials (headers, the TLS client
  certificate, the TLS trust) when its target is a broker of this cluster: the
  host of the admin URL the caller gave, or a host the cluster lists as one of
  its brokers (``GET /admin/v2/clusters``, then ``/admin/v2/brokers/{cluster}``,
  asked through the admin URL the first time a redirect leads elsewhere and
  again at most every :data:`LISTING_MAX_AGE_S` after that);
- a redirect from ``https`` to ``http`` is never followed (the token would
  travel in the clear), nor one to any other host: the 307 is returned as it
  is, and :func:`refused_redirect` names its target for the error message;
- a redirect loop ends after :data:`MAX_REDIRECTS` hops with
  ``requests.TooManyRedirects`` (a topic moving between brokers: the call was
  not served and may be sent again).

The listing needs the right to list the cluster's brokers; without it (a role
that is not a super-user) only the admin URL's own host is trusted, which is
where every broker of a cluster on one machine lives.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests

__all__ = ["LISTING_MAX_AGE_S", "MAX_REDIRECTS", "ClusterSession", "refused_redirect"]

log = logging.getLogger(__name__)

#: hops one call may take from broker to broker before it counts as not served
MAX_REDIRECTS = 5
#: how long the cluster's broker list is trusted before a redirect elsewhere asks again
LISTING_MAX_AGE_S = 30.0
#: the attribute of a response whose redirect was not followed (see refused_redirect)
_REFUSED = "pss_refused_redirect"


def refused_redirect(resp: requests.Response) -> str | None:
    """The target of ``resp``'s redirect when :class:`ClusterSession` did not follow it."""
    target = getattr(resp, _REFUSED, None)
    return target if isinstance(target, str) else None


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


class ClusterSession(requests.Session):
    """A ``requests.Session`` for one cluster's admin API (see the module docstring).

    ``admin_url``: the admin URL the caller gave (its host is trusted);
    ``list_brokers``: whether a redirect to another host may ask the cluster for
    its brokers' hosts (off in unit tests of the session itself).
    """

    def __init__(self, admin_url: str, *, list_brokers: bool = True) -> None:
        super().__init__()
        self.max_redirects = MAX_REDIRECTS
        self._admin_url = admin_url.rstrip("/")
        self._trusted = {_host(admin_url)}
        self._list_brokers = list_brokers
        self._listed: set[str] = set()
        self._listed_at: float | None = None
        self._listing = threading.Lock()
        self._request_kwargs: dict[str, Any] = {}

    # -- what requests asks while following a redirect ---------------------------

    def get_redirect_target(self, resp: requests.Response) -> str | None:
        target = super().get_redirect_target(resp)
        if target is None:
            return None
        absolute = urljoin(resp.url, target)
        if self.may_follow(resp.url, absolute):
            return target
        setattr(resp, _REFUSED, absolute)
        log.warning(
            "not following the redirect of %s %s to %s: not a broker of the cluster at %s",
            resp.request.method,
            resp.url,
            absolute,
            self._admin_url,
        )
        return None

    def should_strip_auth(self, old_url: str, new_url: str) -> bool:
        # get_redirect_target let only redirects within the cluster through
        return not self.may_follow(old_url, new_url)

    # -- the rule ---------------------------------------------------------------

    def may_follow(self, old_url: str, new_url: str) -> bool:
        """Whether a redirect from ``old_url`` to ``new_url`` stays in the cluster."""
        old, new = urlsplit(old_url), urlsplit(new_url)
        if new.scheme not in ("http", "https"):
            return False
        if old.scheme == "https" and new.scheme != "https":
            return False  # never send the credentials in the clear
        host = (new.hostname or "").lower()
        if host in self._trusted or host in self._listed:
            return True
        return host in self._brokers(refresh=True)

    def _brokers(self, *, refresh: bool) -> set[str]:
        """The hosts the cluster lists as its brokers (asked at most every
        :data:`LISTING_MAX_AGE_S`; empty when the cluster will not tell)."""
        if not self._list_brokers:
            return set()
        with self._listing:
            now = time.monotonic()
            fresh = self._listed_at is not None and now - self._listed_at < LISTING_MAX_AGE_S
            if refresh and not fresh:
                self._listed_at = now
                self._listed = self._ask_brokers()
            return self._listed

    def _ask_brokers(self) -> set[str]:
        hosts: set[str] = set()
        try:
            clusters = self._get("/admin/v2/clusters")
            for cluster in clusters if isinstance(clusters, list) else []:
                for broker in self._get(f"/admin/v2/brokers/{cluster}") or []:
                    # a broker id is host:port of its web service
                    hosts.add(_host(f"http://{broker}"))
        except (requests.RequestException, ValueError, _NotListedError) as exc:
            log.info(
                "the cluster at %s does not list its brokers (%s): only its host is "
                "trusted with this client's credentials on a redirect",
                self._admin_url,
                exc,
            )
        hosts.discard("")
        return hosts

    def _get(self, path: str) -> Any:
        resp = self.request(
            "GET", f"{self._admin_url}{path}", allow_redirects=False, **self._request_kwargs
        )
        if resp.status_code != 200:
            raise _NotListedError(f"{path}: {resp.status_code}")
        return resp.json()

    def use_for_listing(self, **kwargs: Any) -> None:
        """The per-request settings (``timeout``, ``verify``, ``cert``) the listing is
        asked with: those of the caller's own requests."""
        self._request_kwargs = dict(kwargs)


class _NotListedError(Exception):
    pass
