"""The few admin (REST) calls the state core needs: topic checks and protection.

Protection of a state topic means: it exists as a non-partitioned topic, its
retention is infinite (nothing acknowledged is ever trimmed), it is never
deleted as "inactive" (the standalone's ``brokerDeleteInactiveTopicsEnabled``
would otherwise delete a topic that only has readers), and, for last-value
state, a compaction threshold keeps the compacted view small.
"""

from __future__ import annotations

import logging
import re
import uuid
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import requests
import urllib3
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from pulsar_state.cluster.session import ClusterSession, refused_redirect
from pulsar_state.errors import (
    AdminUnreachableError,
    ConfigurationError,
    PermissionDeniedError,
    PulsarStateError,
    StateTopicError,
    TopicNotFoundError,
)
from pulsar_state.position import Position
from pulsar_state.topic_names import admin_path

__all__ = [
    "INCARNATION_PROPERTY",
    "PulsarAdmin",
    "entries_compacted_after",
    "refusal_reason",
    "tls_verify",
    "topic_path",
]

log = logging.getLogger(__name__)

#: the topic property that names a topic's incarnation (see PulsarAdmin.incarnation)
INCARNATION_PROPERTY = "pss.incarnation"


def topic_path(topic: str) -> str:
    """``persistent://t/ns/name`` -> ``persistent/t/ns/name`` (validated; see
    :func:`pulsar_state.topic_names.admin_path`)."""
    return admin_path(topic)


def entries_compacted_after(internal_stats: dict[str, Any], position: Position) -> int:
    """Entries of the topic after ``position`` that compaction has absorbed: up
    to the compaction horizon (the ``__compaction`` cursor), counted from the
    ledgers of the topic's ``internalStats``; 0 without a horizon past it."""
    horizon = internal_stats.get("cursors", {}).get("__compaction", {}).get("markDeletePosition")
    if not horizon:
        return 0
    try:
        h_ledger, h_entry = (int(part) for part in str(horizon).split(":"))
        current = int(str(internal_stats.get("lastConfirmedEntry", "-1:-1")).split(":")[0])
    except ValueError:
        return 0
    total = 0
    for ledger in internal_stats.get("ledgers", []):
        ledger_id = int(ledger.get("ledgerId", -1))
        if ledger_id < position.ledger or ledger_id > h_ledger:
            continue
        count = int(
            internal_stats.get("currentLedgerEntries", 0)
            if ledger_id == current
            else ledger.get("entries", 0)
        )
        first = position.entry + 1 if ledger_id == position.ledger else 0
        last = h_entry + 1 if ledger_id == h_ledger else count
        total += max(0, last - first)
    return total


_insecure_said = False


def _insecure() -> bool:
    """``verify=False``, said once per process in the log, and urllib3's per-request
    ``InsecureRequestWarning`` silenced (the log line says it once)."""
    global _insecure_said  # noqa: PLW0603 -- once per process
    # each time: a warnings filter does not outlive catch_warnings (pytest's, say);
    # an identical filter is replaced, not added again
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    if not _insecure_said:
        _insecure_said = True
        log.warning(
            "TLS certificates of the Pulsar admin API are not checked (tls allow insecure): "
            "anyone between here and the cluster can read and change the admin calls"
        )
    return False


def tls_verify(trust_cert_path: str | None, *, allow_insecure: bool = False) -> bool | str:
    """``requests``' ``verify`` for an admin API whose certificate is signed by
    ``trust_cert_path`` (a PEM bundle; ``None``: the system's trusted CAs).

    ``allow_insecure`` (``--tls-allow-insecure``, ``tlsAllowInsecureConnection``):
    ``False``, no certificate is checked; a WARNING says so once per process.

    Raises:
        ConfigurationError: ``trust_cert_path`` is not a readable file.
    """
    if allow_insecure is not False and allow_insecure is not True:
        raise ConfigurationError(f"allow_insecure must be a bool, got {allow_insecure!r}")
    if trust_cert_path is not None and (
        not isinstance(trust_cert_path, str | Path) or not Path(trust_cert_path).is_file()
    ):
        raise ConfigurationError(
            f"the admin API's TLS trust cert path {trust_cert_path!r} is not a file (a PEM CA "
            "bundle)"
        )
    if allow_insecure:
        return _insecure()
    return True if trust_cert_path is None else str(trust_cert_path)


def refusal_reason(resp: requests.Response, *, limit: int = 300) -> str:
    """The broker's ``reason`` of a refused admin call; for an HTML error page
    (Jetty's, e.g. a 401 before any handler ran) its title or the status line;
    else the first ``limit`` characters of its body."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("reason"):
        return str(body["reason"])
    text = resp.text
    if "html" in resp.headers.get("Content-Type", "") or text.lstrip().startswith("<"):
        title = _HTML_TITLE.search(text)
        if title and title.group(1).strip():
            return " ".join(title.group(1).split())
        return f"HTTP {resp.status_code} {resp.reason or ''}".strip()
    return text[:limit] or f"HTTP {resp.status_code}"


def _answered_by(resp: requests.Response) -> str:
    """``" from the broker at URL"``: the broker that gave the answer, when a
    redirect led from the admin URL to another one; else ``""``."""
    if not resp.history:
        return ""
    parts = urlsplit(resp.url)
    return f" from the broker at {parts.scheme}://{parts.netloc}"


_HTML_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


class _TransientError(Exception):
    pass


#: answers that say the call was not served at all: sent again whatever its method
_NOT_SERVED = (502, 503)
#: answers after which only a read is sent again
_RETRY_READS = (500,)


class PulsarAdmin:
    """Minimal Pulsar admin REST client (``requests``), with auth headers if given."""

    def __init__(
        self,
        admin_url: str,
        *,
        headers: dict[str, str] | None = None,
        timeout_s: float = 10.0,
        retry_s: float = 60.0,
        verify: bool | str = True,
        cert: tuple[str, str] | None = None,
        auth: requests.auth.AuthBase | None = None,
    ) -> None:
        """``timeout_s`` bounds one HTTP attempt; idempotent calls are retried on
        connection errors, timeouts and 5xx answers for up to ``retry_s`` (a
        broker restart takes ~10-20 s), then fail with :class:`AdminUnreachableError`.
        ``verify``: ``requests``' TLS verification (see :func:`tls_verify`); a
        certificate it does not trust fails at once, it is not retried.
        ``cert``: ``(certificate file, key file)`` of a TLS client certificate sent
        with every call (TLS authentication). ``auth``: a ``requests`` authentication
        applied to every call (OAuth 2.0 bearer tokens). Build one from an
        :class:`~pulsar_state.cluster.endpoint.AdminEndpoint` (``endpoint.admin()``)."""
        if not admin_url.startswith(("http://", "https://")):
            raise StateTopicError(f"admin_url must be http(s)://..., got {admin_url!r}")
        self.admin_url = admin_url.rstrip("/")
        # follows a broker's redirect to the topic's owner with the credentials,
        # within the cluster only (see pulsar_state.cluster.session)
        self._session = ClusterSession(self.admin_url)
        self._session.headers.update(headers or {})
        self._session.auth = auth
        # per request, not session.verify: requests lets REQUESTS_CA_BUNDLE override a
        # session's verify, but not a request's
        self._verify = _insecure() if verify is False else verify
        self._cert = cert
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._session.use_for_listing(timeout=timeout_s, verify=self._verify, cert=cert)

    def close(self) -> None:
        self._session.close()

    def request(self, method: str, path: str, json: Any = None) -> requests.Response:
        retrying = Retrying(
            retry=retry_if_exception_type(_TransientError),
            stop=stop_after_delay(self._retry_s),
            wait=wait_exponential(multiplier=0.1, max=2),
            reraise=True,
        )
        try:
            return retrying(self._attempt, method, path, json)
        except _TransientError as exc:
            raise AdminUnreachableError(
                f"the Pulsar admin API at {self.admin_url} did not answer {method} {path} "
                f"within {self._retry_s:.0f}s: {exc}"
            ) from exc

    def _attempt(self, method: str, path: str, json: Any) -> requests.Response:
        try:
            resp = self._session.request(
                method,
                f"{self.admin_url}{path}",
                json=json,
                timeout=self._timeout_s,
                verify=self._verify,
                cert=self._cert,
            )
        except requests.exceptions.SSLError as exc:
            # a certificate nobody told us to trust will not become trusted on retry
            raise AdminUnreachableError(
                f"TLS to the Pulsar admin API at {self.admin_url} failed ({exc}): if its "
                "certificate is signed by a private CA, pass that CA's PEM file "
                "(AdminEndpoint(tls_trust_cert_path=...); on the command line "
                "--tls-trust-cert-path or env PULSAR_TLS_TRUST_CERT_PATH; in a function's or "
                "sink's user config "
                "tlsTrustCertsFilePath)"
            ) from exc
        except requests.TooManyRedirects as exc:
            # brokers handing the call on in a loop (the topic moving): not served
            raise _TransientError(f"redirected in a loop ({exc})") from exc
        except (requests.ConnectionError, requests.Timeout) as exc:
            # every call made here is idempotent, so a timed-out one is re-sent
            raise _TransientError(str(exc)) from exc
        refused = refused_redirect(resp)
        if refused is not None:
            raise StateTopicError(
                f"the Pulsar admin API at {self.admin_url} redirected {method} {path} to "
                f"{refused}, which is not a broker of its cluster (neither its host nor "
                "one the cluster lists), or not over https when the admin URL is: this "
                "client's credentials are not sent there"
            )
        # 502/503: the call was not served (a proxy without a broker behind it, a
        # broker loading or handing over the topic): every call is sent again.
        # 500: only a read, which changes nothing if it did run.
        if resp.status_code in _NOT_SERVED or (
            resp.status_code in _RETRY_READS and method == "GET"
        ):
            raise _TransientError(f"{resp.status_code}{_answered_by(resp)} {resp.text[:200]}")
        return resp

    def _check(
        self,
        resp: requests.Response,
        what: str,
        ok: tuple[int, ...] = (200, 204),
        *,
        read_only: bool = False,
    ) -> None:
        if resp.status_code in ok:
            return
        if resp.status_code == 401:
            raise PermissionDeniedError(
                f"{what}: not permitted, the admin API{_answered_by(resp)} did not accept "
                f"this client's credentials (401: {refusal_reason(resp)}); pass a token "
                "(--auth-token, or "
                "the auth plugin token), basic auth, or a TLS client certificate "
                "(--auth-plugin tls --auth-params tlsCertFile:...,tlsKeyFile:...; in code, an "
                "AdminEndpoint's headers or client_cert)"
            )
        if resp.status_code == 403 and read_only:
            raise PermissionDeniedError(
                f"{what}: not permitted for this role "
                f"({resp.status_code}{_answered_by(resp)}: {refusal_reason(resp)}); "
                "reading needs the consume (or produce) permission on the topic"
            )
        if resp.status_code == 403:
            raise PermissionDeniedError(
                f"{what}: not permitted for this role "
                f"({resp.status_code}{_answered_by(resp)}: {refusal_reason(resp)}); "
                "a role without admin rights can open the state with ensure_retention=False "
                "once an administrator has protected the topic"
            )
        raise StateTopicError(
            f"{what} failed ({resp.status_code}{_answered_by(resp)}: {resp.text[:300]})"
        )

    # -- topics ---------------------------------------------------------------

    def ensure_topic(self, topic: str) -> None:
        """Create the non-partitioned topic unless it exists; refuse a partitioned one."""
        path = topic_path(topic)
        meta = self.request("GET", f"/admin/v2/{path}/partitions")
        if meta.status_code == 200 and int(meta.json().get("partitions", 0)) > 0:
            raise StateTopicError(f"{topic} is partitioned; a state topic must not be")
        resp = self.request("PUT", f"/admin/v2/{path}")
        self._check(resp, f"creating {topic}", ok=(200, 204, 409))

    def incarnation(self, topic: str) -> str | None:
        """An id of this incarnation of ``topic``: made when first asked for and
        kept in the topic's properties (``pss.incarnation``), so a topic deleted
        and made again under the same name has a new one. Snapshots and
        checkpoints record it, and one of another incarnation is not loaded.

        ``None`` when the admin API will not keep it (a role without the
        permission, an old broker): nothing is bound then.
        """
        path = f"/admin/v2/{topic_path(topic)}/properties"
        try:
            for attempt in range(2):
                resp = self.request("GET", path)
                if resp.status_code != 200:
                    return None
                found = (resp.json() or {}).get(INCARNATION_PROPERTY)
                if found or attempt:
                    return str(found) if found else None
                made = self.request("PUT", path, json={INCARNATION_PROPERTY: uuid.uuid4().hex})
                if made.status_code not in (200, 204):
                    return None
                # read back: of two processes setting it at once, the last one wins
        except PulsarStateError as exc:
            log.debug("no incarnation for %s: %s", topic, exc)
        return None

    def require_topic(self, topic: str) -> None:
        """Raise :class:`TopicNotFoundError` unless the non-partitioned topic exists.

        Read-only: two GETs (partitioned metadata, stats), which a role with
        only the consume permission may make; nothing is created or changed.
        """
        path = topic_path(topic)
        meta = self.request("GET", f"/admin/v2/{path}/partitions")
        if meta.status_code == 404:  # the tenant or namespace does not exist
            raise TopicNotFoundError(f"topic {topic} does not exist ({refusal_reason(meta)})")
        self._check(meta, f"looking up {topic}", read_only=True)
        if int(meta.json().get("partitions", 0)) > 0:
            raise StateTopicError(f"{topic} is partitioned; a state topic must not be")
        stats = self.request("GET", f"/admin/v2/{path}/stats")
        if stats.status_code == 404:
            raise TopicNotFoundError(f"topic {topic} does not exist")
        self._check(stats, f"looking up {topic}", read_only=True)

    def protect(
        self,
        topic: str,
        *,
        compaction_threshold_bytes: int | None = None,
        backlog_only: bool = False,
    ) -> None:
        """Infinite retention, no inactive deletion, optional compaction threshold.

        ``backlog_only``: zero retention instead, so that only what a
        subscription has not acknowledged is kept (a map's checkpoints).

        Each policy is read first and written only when it differs: a policy
        write goes through the namespace's system topic, so managers opening an
        already protected topic (the common case) write nothing.
        """
        path = topic_path(topic)
        keep = 0 if backlog_only else -1
        retention = {"retentionTimeInMinutes": keep, "retentionSizeInMB": keep}
        self._ensure_policy(path, "retention", retention, f"setting the retention of {topic}")
        inactive = {
            "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
            "maxInactiveDurationSeconds": -1,
            "deleteWhileInactive": False,
        }
        self._ensure_policy(
            path, "inactiveTopicPolicies", inactive, f"disabling inactive-topic deletion on {topic}"
        )
        if compaction_threshold_bytes is not None:
            self._ensure_policy(
                path,
                "compactionThreshold",
                compaction_threshold_bytes,
                f"setting the compaction threshold on {topic}",
            )

    def _ensure_policy(self, path: str, policy: str, wanted: Any, what: str) -> None:
        current = self.request("GET", f"/admin/v2/{path}/{policy}")
        if current.status_code == 200 and current.text:
            try:
                value = current.json()
            except ValueError:
                value = None
            if value == wanted or (
                isinstance(value, dict)
                and isinstance(wanted, dict)
                and all(value.get(k) == v for k, v in wanted.items())
            ):
                return
        self._check(self.request("POST", f"/admin/v2/{path}/{policy}", json=wanted), what)

    def retention(self, topic: str) -> dict[str, Any]:
        resp = self.request("GET", f"/admin/v2/{topic_path(topic)}/retention?applied=true")
        self._check(resp, f"reading retention of {topic}")
        return dict(resp.json() or {})

    def compact(self, topic: str) -> None:
        resp = self.request("PUT", f"/admin/v2/{topic_path(topic)}/compaction")
        self._check(resp, f"triggering compaction of {topic}", ok=(200, 204, 409))

    def last_message_id(self, topic: str) -> Position:
        """The position of ``topic``'s last message (``GET .../lastMessageId``,
        the broker's answer a consumer's ``get_last_message_id`` also gets,
        with the batch index of a batch entry). A read: no subscription is made,
        so nothing is left behind when the call meets an unload, and a missing
        topic is not created. An empty topic answers ``entry == -1``.

        Returns:
            The last message's position.

        Raises:
            TopicNotFoundError: the topic does not exist.
            PermissionDeniedError: this role may not read the topic (it needs the
                consume permission).
            AdminUnreachableError: no answer within ``retry_s``.
        """
        resp = self.request("GET", f"/admin/v2/{topic_path(topic)}/lastMessageId")
        if resp.status_code == 404:
            raise TopicNotFoundError(f"topic {topic} does not exist ({refusal_reason(resp)})")
        self._check(resp, f"reading the last message id of {topic}", read_only=True)
        body = resp.json()
        try:
            return Position(
                int(body["ledgerId"]), int(body["entryId"]), int(body.get("batchIndex", -1))
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateTopicError(
                f"the last message id of {topic} came back unreadable ({resp.text[:200]})"
            ) from exc

    def compaction_status(self, topic: str) -> str:
        resp = self.request("GET", f"/admin/v2/{topic_path(topic)}/compaction")
        self._check(resp, f"reading compaction status of {topic}")
        return str(resp.json().get("status", "NOT_RUN"))

    def internal_stats(self, topic: str) -> dict[str, Any]:
        """The managed ledger's ``internalStats``: ledgers, cursors, compaction."""
        resp = self.request("GET", f"/admin/v2/{topic_path(topic)}/internalStats")
        self._check(resp, f"reading internal stats of {topic}")
        return dict(resp.json())

    def stats(self, topic: str) -> dict[str, Any]:
        resp = self.request("GET", f"/admin/v2/{topic_path(topic)}/stats")
        self._check(resp, f"reading stats of {topic}")
        return dict(resp.json())

    def waiting_producers(self, topic: str, *, timeout_s: float) -> int:
        """How many producers wait for ``topic``'s exclusive access (PIP-68
        ``WaitForExclusive``): its stats' ``waitingPublishers``. One attempt of
        at most ``timeout_s``, no retry: the caller treats no answer as unknown.

        Raises :class:`PermissionDeniedError` (this role may not read the
        topic's stats), ``requests.RequestException`` (no answer in time),
        :class:`StateTopicError` (any other refusal, or a broker whose stats
        lack the count).
        """
        resp = self._session.get(
            f"{self.admin_url}/admin/v2/{topic_path(topic)}/stats",
            params={"getPreciseBacklog": "false", "subscriptionBacklogSize": "false"},
            timeout=timeout_s,
            verify=self._verify,
            cert=self._cert,
        )
        self._check(resp, f"reading stats of {topic}", read_only=True)
        waiting = resp.json().get("waitingPublishers")
        if not isinstance(waiting, int):
            raise StateTopicError(f"the stats of {topic} have no waitingPublishers count")
        return waiting

    def reap_subscriptions(self, topic: str, prefix: str) -> list[str]:
        """Delete ``prefix*`` subscriptions that no consumer holds (left by crashes)."""
        subs = self.stats(topic).get("subscriptions", {})
        reaped = []
        for name, sub in subs.items():
            if name.startswith(prefix) and not sub.get("consumers"):
                resp = self.request(
                    "DELETE",
                    f"/admin/v2/{topic_path(topic)}/subscription/{quote(name, safe='')}",
                )
                if resp.status_code in (200, 204, 404):
                    reaped.append(name)
        if reaped:
            log.info("reaped %d stale tail subscriptions on %s", len(reaped), topic)
        return reaped

    def delete_topic(self, topic: str, *, force: bool = True) -> None:
        resp = self.request("DELETE", f"/admin/v2/{topic_path(topic)}?force={str(force).lower()}")
        self._check(resp, f"deleting {topic}", ok=(200, 204, 404))
