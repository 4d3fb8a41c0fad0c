"""Functions on a cluster through the admin REST API: no Java, no distribution.

The same operations as :class:`~pulsar_state.deploy.pulsar_admin.PulsarAdminCli`,
made the way ``pulsar-admin`` makes them (its Java admin client,
``FunctionsImpl``): create is ``POST /admin/v3/functions/{tenant}/{ns}/{name}``
and update a ``PUT`` there, each a ``multipart/form-data`` body with the
function's code as the ``data`` part (a file, whose name tells the worker a
``.py`` from a ``.zip`` or ``.whl``) and its ``FunctionConfig`` as the
``functionConfig`` part (JSON); status is ``GET .../status``, delete is
``DELETE``. The code packages the worker keeps are listed and deleted through
``/admin/v3/packages/function/{tenant}/{ns}/{name}``.

A refused call raises :class:`~pulsar_state.deploy.errors.PulsarAdminError`
with the HTTP status and the worker's ``reason``; an unreachable cluster
:class:`~pulsar_state.errors.AdminUnreachableError`. Reads are retried on
connection errors and 5xx for ``retry_s``; a create, update or delete is sent
again only while the worker answers 503 (not ready: nothing was done), for
``ready_wait_s``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from pulsar_state.cluster.admin import refusal_reason
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.cluster.session import ClusterSession, refused_redirect
from pulsar_state.deploy.errors import PulsarAdminError
from pulsar_state.errors import AdminUnreachableError, ConfigurationError

__all__ = ["PulsarAdminRest"]

log = logging.getLogger(__name__)

Fqn = tuple[str, str, str]


def _admin_reason(resp: requests.Response) -> str:
    return refusal_reason(resp, limit=1500)


class _TransientError(Exception):
    pass


def _while_transient(
    attempt: Callable[[], requests.Response],
    *,
    within_s: float,
    between: Callable[[], object] | None = None,
) -> requests.Response:
    """``attempt()``, again with backoff while it raises :class:`_TransientError`,
    for ``within_s``; ``between()`` runs before each new attempt."""

    def before_sleep(_state: RetryCallState) -> None:
        if between is not None:
            between()

    return Retrying(
        retry=retry_if_exception_type(_TransientError),
        stop=stop_after_delay(within_s),
        wait=wait_exponential(multiplier=0.2, max=3),
        before_sleep=before_sleep,
        reraise=True,
    )(attempt)


class PulsarAdminRest:
    """Create, update, inspect and delete functions through the admin REST API."""

    def __init__(
        self,
        *,
        admin_url: str,
        headers: dict[str, str] | None = None,
        verify: bool | str = True,
        cert: tuple[str, str] | None = None,
        auth: requests.auth.AuthBase | None = None,
        timeout_s: float = 180.0,
        retry_s: float = 30.0,
        ready_wait_s: float = 120.0,
    ) -> None:
        """``headers``: authentication (``ClusterAuth.admin_headers()``); ``verify`` and
        ``cert``: TLS trust and client certificate as ``requests`` takes them; ``auth``:
        a ``requests`` authentication for every call (OAuth 2.0 bearer tokens);
        ``timeout_s`` bounds one call (an upload of a large package included);
        ``ready_wait_s``: how long a write waits for a worker answering 503."""
        if not admin_url.startswith(("http://", "https://")):
            raise ConfigurationError(f"admin_url must be an http(s) URL, got {admin_url!r}")
        if ready_wait_s < 0:
            raise ValueError(f"ready_wait_s must be >= 0, got {ready_wait_s}")
        if timeout_s <= 0 or retry_s < 0:
            raise ValueError(f"timeout_s must be > 0 and retry_s >= 0, got {timeout_s}, {retry_s}")
        self.admin_url = admin_url.rstrip("/")
        # a worker hands an instance's status on to the worker that runs it (307):
        # followed with the credentials, within the cluster (pulsar_state.cluster.session)
        self._session = ClusterSession(self.admin_url)
        self._session.headers.update(headers or {})
        self._session.auth = auth
        # per request (see _send): requests lets REQUESTS_CA_BUNDLE override a
        # session's verify, but not a request's
        self._verify = verify
        if cert is not None:
            self._session.cert = cert
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._ready_wait_s = ready_wait_s
        self._session.use_for_listing(timeout=timeout_s, verify=verify, cert=cert)

    @classmethod
    def for_endpoint(cls, endpoint: AdminEndpoint, **kwargs: Any) -> PulsarAdminRest:
        """A client of ``endpoint``: its URL, credentials, client certificate and TLS
        trust; ``kwargs``: the timeouts."""
        return cls(
            admin_url=endpoint.url,
            headers=dict(endpoint.headers or {}),
            auth=endpoint.requests_auth(),
            verify=endpoint.verify(),
            cert=endpoint.client_cert,
            **kwargs,
        )

    @classmethod
    def with_auth(cls, admin_url: str, auth: ClusterAuth) -> PulsarAdminRest:
        """A client authenticating and trusting TLS as ``auth`` says (the CLI's options)."""
        return cls.for_endpoint(auth.admin_endpoint(admin_url))

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> PulsarAdminRest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- HTTP -------------------------------------------------------------------

    @staticmethod
    def _path(kind: str, fqn: Fqn) -> str:
        return f"/admin/v3/{kind}/" + "/".join(quote(part, safe="") for part in fqn)

    def _send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        try:
            resp = self._session.request(
                method,
                f"{self.admin_url}{path}",
                timeout=self._timeout_s,
                verify=self._verify,
                **kwargs,
            )
        except (requests.TooManyRedirects, requests.ConnectionError, requests.Timeout) as exc:
            raise AdminUnreachableError(
                f"the Pulsar admin API at {self.admin_url} did not answer {method} {path}: {exc}"
            ) from exc
        refused = refused_redirect(resp)
        if refused is not None:
            raise PulsarAdminError(
                [method, path],
                resp.status_code,
                f"redirected to {refused}, which is not a broker of this cluster: this "
                "client's credentials are not sent there",
            )
        return resp

    def _read(self, path: str) -> requests.Response:
        """A GET, retried on connection errors and 5xx answers for ``retry_s``."""

        def attempt() -> requests.Response:
            try:
                resp = self._send("GET", path)
            except AdminUnreachableError as exc:
                raise _TransientError(str(exc)) from exc
            if resp.status_code >= 500:
                raise _TransientError(f"{resp.status_code}: {_admin_reason(resp)}")
            return resp

        try:
            return _while_transient(attempt, within_s=self._retry_s)
        except _TransientError as exc:
            raise AdminUnreachableError(
                f"the Pulsar admin API at {self.admin_url} did not answer GET {path} "
                f"within {self._retry_s:.0f}s: {exc}"
            ) from exc

    @staticmethod
    def _check(resp: requests.Response, what: list[str], ok: tuple[int, ...] = (200, 204)) -> None:
        if resp.status_code not in ok:
            raise PulsarAdminError(what, resp.status_code, _admin_reason(resp))

    # -- functions --------------------------------------------------------------

    def _upload(self, method: str, fqn: Fqn, config: dict[str, Any], code: Path) -> None:
        tenant, namespace, name = fqn
        body = {**config, "tenant": tenant, "namespace": namespace, "name": name}
        if code.suffix in (".py", ".zip", ".whl"):
            body.setdefault("runtime", "PYTHON")
            body["py"] = code.name
        what = [method, "functions", "/".join(fqn)]
        log.info("%s %s with %s (%d bytes)", method, "/".join(fqn), code.name, code.stat().st_size)

        def send() -> requests.Response:
            with code.open("rb") as data:
                files = {
                    "data": (code.name, data, "application/octet-stream"),
                    "functionConfig": (None, json.dumps(body), "application/json"),
                }
                return self._send(method, self._path("functions", fqn), files=files)

        # a create refused with 503 may have stored its package already (seen:
        # the resent create then failed "Package ... metadata already exists");
        # the function does not exist yet, so what is stored under its name is
        # that half-done attempt's: remove it before sending again
        def before_retry() -> None:
            if method == "POST":
                self.delete_packages(fqn)

        self._check(self._unless_unavailable(send, what, before_retry=before_retry), what)

    def _unless_unavailable(
        self,
        send: Callable[[], requests.Response],
        what: list[str],
        *,
        before_retry: Callable[[], object] | None = None,
    ) -> requests.Response:
        """``send()``, again while the worker answers 503, for ``ready_wait_s``.

        A functions worker answers 503 ("Leader not yet ready", "Function worker
        service is not done initializing") before it takes a request, for a while
        after it starts: nothing was done, so sending again is safe.
        """

        def attempt() -> requests.Response:
            resp = send()
            if resp.status_code == 503:
                log.info("%s: %s; retrying", " ".join(what), _admin_reason(resp))
                raise _TransientError(f"503: {_admin_reason(resp)}")
            return resp

        try:
            return _while_transient(attempt, within_s=self._ready_wait_s, between=before_retry)
        except _TransientError as exc:
            raise PulsarAdminError(
                what, 503, f"not ready within {self._ready_wait_s:.0f}s: {exc}"
            ) from exc

    def create_function(self, *, fqn: Fqn, config: dict[str, Any], code: Path) -> None:
        """Register ``fqn`` with ``config`` (a ``FunctionConfig`` mapping) and ``code``."""
        self._upload("POST", fqn, config, code)

    def update_function(self, *, fqn: Fqn, config: dict[str, Any], code: Path) -> None:
        """Replace the config and code of ``fqn`` (the worker restarts its instances)."""
        self._upload("PUT", fqn, config, code)

    def function_exists(self, fqn: Fqn) -> bool:
        resp = self._read(self._path("functions", fqn))
        if resp.status_code == 404:
            return False
        self._check(resp, ["GET", "functions", "/".join(fqn)])
        return True

    def function_status(self, fqn: Fqn) -> dict[str, Any]:
        resp = self._read(self._path("functions", fqn) + "/status")
        self._check(resp, ["GET", "functions", "/".join(fqn), "status"])
        status: dict[str, Any] = resp.json()
        return status

    def delete_function(self, fqn: Fqn) -> bool:
        """Delete ``fqn``; ``False`` if it was not there."""
        what = ["DELETE", "functions", "/".join(fqn)]
        resp = self._unless_unavailable(
            lambda: self._send("DELETE", self._path("functions", fqn)), what
        )
        if resp.status_code == 404:
            return False
        self._check(resp, what)
        return True

    def delete_packages(self, fqn: Fqn) -> list[str]:
        """Delete the code packages the worker stored for ``fqn``; the versions deleted.

        Pulsar 4.0's worker keeps ``function://tenant/ns/name@<version>`` after
        a function is deleted, and a later create of the same name then fails
        ("Package ... metadata already exists").
        """
        path = self._path("packages/function", fqn)
        resp = self._read(path)
        if resp.status_code != 200:  # none stored, or no package management
            log.debug("no packages for %s: %s", "/".join(fqn), _admin_reason(resp)[-200:])
            return []
        deleted = []
        for version in resp.json() or []:
            gone = self._send("DELETE", f"{path}/{quote(str(version), safe='')}")
            if gone.status_code in (200, 204, 404):
                deleted.append(str(version))
            else:
                log.warning(
                    "could not delete package %s@%s: %s",
                    "/".join(fqn),
                    version,
                    _admin_reason(gone),
                )
        return deleted
