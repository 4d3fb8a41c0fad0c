"""Options of the ``pulsar_state`` Spark data source: :class:`SourceOptions`
(parsed and validated, picklable, with the driver/executor helpers that open
clients and ask the admin API) and the schema each mode reads."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pulsar
import requests
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

from pulsar_state.cluster.admin import topic_path
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.cluster.session import ClusterSession, refused_redirect
from pulsar_state.errors import (
    ConfigurationError,
    PermissionDeniedError,
    PulsarStateError,
    TopicNotFoundError,
)
from pulsar_state.map.op import MapCodec
from pulsar_state.position import Position
from pulsar_state.retry import is_transient
from pulsar_state.serde import BytesSerde, JsonSerde, Serde, StrKeySerde, StrSerde
from pulsar_state.topic_names import checkpoint_topic, full_topic_name

__all__ = ["SourceOptions", "source_schema"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")


_MODES = ("snapshot", "changelog")
_FORMATS: dict[str, Serde[Any]] = {
    "json": JsonSerde(),
    "string": StrSerde(),
    "binary": BytesSerde(),
}
_MAX_PARTITIONS = 10_000
_TRUST_HINT = (
    "give the CA that signs the cluster's certificate with the option tlsTrustCertsFilePath "
    "(or tlsAllowInsecureConnection=true, tests only)"
)


def _flag(opts: dict[str, str], name: str, default: str) -> bool:
    value = opts.get(name.lower(), default).lower()
    if value not in ("true", "false"):
        raise ValueError(f"pulsar_state: {name} is true or false, got {value!r}")
    return value == "true"


def _parse_auth(opts: dict[str, str], admin_url: str) -> ClusterAuth:
    """authToken / authPlugin + authParams and the TLS trust options, spelled as in
    Pulsar's ``client.conf``, as one :class:`ClusterAuth`; checked here, on the driver,
    so a bad file or plugin is a clear error naming the option (never quoting the
    token)."""
    trust = opts.get("tlstrustcertsfilepath") or None
    if trust is not None and not Path(trust).is_file():
        raise ValueError(
            f"pulsar_state: tlsTrustCertsFilePath {trust!r} is not a file (a PEM CA bundle)"
        )
    try:
        auth = ClusterAuth(
            auth_token=opts.get("authtoken") or None,
            auth_plugin=opts.get("authplugin") or None,
            auth_params=opts.get("authparams") or None,
            tls_trust_cert_path=trust,
            tls_allow_insecure=_flag(opts, "tlsAllowInsecureConnection", "false"),
            tls_hostname_verification=_flag(opts, "tlsEnableHostnameVerification", "false"),
        )
        auth.client_authentication()  # tls params name both files, a token file is readable
        auth.admin_endpoint(admin_url)  # the client certificate's files exist; oauth2 parses
    except ConfigurationError as exc:
        raise ValueError(f"pulsar_state: authToken / authPlugin / authParams: {exc}") from None
    return auth


@dataclass(frozen=True)
class SourceOptions:
    """Validated options (picklable)."""

    service_url: str
    admin_url: str
    topic: str
    mode: str
    value_format: str
    include_metadata: bool
    #: None: the mode's default (snapshot 1, changelog the driver's cores)
    num_partitions: int | None
    timeout_ms: int
    pushdown: bool = False
    #: a snapshot reads the map's newest checkpoint plus the tail, when it has one
    use_checkpoint: bool = True
    #: credentials and TLS trust of the client (driver and executors) and the admin
    #: calls; out of repr (a token, a password)
    auth: ClusterAuth = field(default_factory=ClusterAuth, repr=False)

    @classmethod
    def parse(cls, options: dict[str, str]) -> SourceOptions:
        opts = {k.lower(): v for k, v in options.items()}

        def need(name: str) -> str:
            value = opts.get(name.lower())
            if not value:
                raise ValueError(f"pulsar_state: option '{name}' is required")
            return value

        mode = opts.get("mode", "snapshot").lower()
        if mode not in _MODES:
            raise ValueError(f"pulsar_state: mode must be one of {_MODES}, got {mode!r}")
        value_format = opts.get("valueformat", "json").lower()
        if value_format not in _FORMATS:
            raise ValueError(
                f"pulsar_state: valueFormat must be one of {tuple(_FORMATS)}, got {value_format!r}"
            )
        partitions: int | None = None
        if opts.get("numpartitions") is not None:
            raw = opts["numpartitions"]
            try:
                partitions = int(raw)
            except ValueError:
                partitions = 0
            if not 1 <= partitions <= _MAX_PARTITIONS:
                raise ValueError(
                    f"pulsar_state: numPartitions must be an integer from 1 to "
                    f"{_MAX_PARTITIONS}, got {raw!r}"
                )
        try:
            timeout_ms = int(opts.get("timeoutms", "30000"))
        except ValueError:
            timeout_ms = 0
        if timeout_ms < 1:
            raise ValueError(
                f"pulsar_state: timeoutMs must be an integer >= 1, got {opts.get('timeoutms')!r}"
            )
        include = _flag(opts, "includeMetadata", "false")
        pushdown = _flag(opts, "pushdown", "false")
        checkpoint = _flag(opts, "checkpoint", "true")
        topic = full_topic_name(need("topic"))  # InvalidTopicNameError is a clear message too
        service_url = need("serviceUrl")
        if not service_url.startswith(("pulsar://", "pulsar+ssl://")):
            raise ValueError(f"pulsar_state: serviceUrl must be pulsar://..., got {service_url!r}")
        admin_url = need("adminUrl").rstrip("/")
        if not admin_url.startswith(("http://", "https://")):
            raise ValueError(f"pulsar_state: adminUrl must be http(s)://..., got {admin_url!r}")
        return cls(
            service_url=service_url,
            admin_url=admin_url,
            topic=topic,
            mode=mode,
            value_format=value_format,
            include_metadata=include,
            num_partitions=partitions,
            timeout_ms=timeout_ms,
            pushdown=pushdown,
            use_checkpoint=checkpoint,
            auth=_parse_auth(opts, admin_url),
        )

    # -- helpers used where the code runs -----------------------------------------

    def client(self, *, operation_timeout_s: int | None = None) -> pulsar.Client:
        """A client with these options' credentials; its operation timeout is
        ``timeoutMs`` unless given."""
        return pulsar.Client(
            self.service_url,
            **self.auth.client_kwargs(),
            operation_timeout_seconds=operation_timeout_s or max(1, self.timeout_ms // 1000),
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )

    def connect(
        self, open_: Callable[[pulsar.Client], _T], *, what: str
    ) -> tuple[pulsar.Client, _T]:
        """A new client and what ``open_`` made with it (a reader, an answer), within
        ``timeoutMs``; the caller closes the client.

        A consumer or reader whose first subscribe meets its topic closing (an
        unload, a bundle move, a broker restart) can stall in the C++ client until
        the client's operation timeout: it is told to retry, then skips the retry
        because the connection it subscribed on is still set. So no attempt may
        spend the whole budget: the first gets a client whose operation timeout is
        a quarter of ``timeoutMs``, each next one twice as much (within what is
        left), and a transient failure (see :func:`~pulsar_state.retry.is_transient`)
        is tried again on a new client after a short backoff; a permanent one (not
        authorized, no such topic) is raised at once, as is the last transient one.

        The C++ client reports credentials the broker refuses as a timeout (it
        retries the refused connection until its operation timeout; Pulsar 4.0.8,
        pulsar-client 3.x): so after an attempt that timed out, the admin API is
        asked with the same credentials, and a refusal there is raised at once
        as ``PermissionError`` instead of spending the rest of the budget.
        """
        budget_s = self.timeout_ms / 1000
        deadline = time.monotonic() + budget_s

        def again(state: RetryCallState) -> None:
            outcome = state.outcome.exception() if state.outcome else None
            log.warning(
                "pulsar_state: %s of %s failed (%s: %s), attempt %d; trying again",
                what,
                self.topic,
                type(outcome).__name__,
                outcome,
                state.attempt_number,
            )

        for attempt in Retrying(
            stop=stop_after_delay(budget_s),
            wait=wait_exponential(multiplier=0.05, max=1.0),
            retry=retry_if_exception(is_transient),
            before_sleep=again,
            reraise=True,
        ):
            with attempt:
                share = budget_s / 4 * 2 ** (attempt.retry_state.attempt_number - 1)
                left = deadline - time.monotonic()
                client = self.client(operation_timeout_s=max(1, round(min(share, left))))
                try:
                    return client, open_(client)
                except pulsar.Timeout:
                    client.close()
                    self._check_credentials()
                    raise
                except BaseException:
                    client.close()
                    raise
        raise AssertionError("unreachable: tenacity re-raises the last failure")

    def _check_credentials(self) -> None:
        """Raise ``PermissionError`` if the admin API refuses these credentials for
        the topic; any other answer (or none) says nothing about them."""
        try:
            self._admin_get("stats")  # its PermissionError goes to the caller
        except (ValueError, ConnectionError) as exc:
            log.debug("pulsar_state: could not check the credentials for %s: %s", self.topic, exc)

    def partitions_for(self, mode: str) -> int:
        if self.num_partitions is not None:
            return self.num_partitions
        return max(1, os.cpu_count() or 1) if mode == "changelog" else 1

    def check_topic(self) -> None:
        """On the driver: the broker answers and the topic exists, or a clear error."""
        self._admin_get("stats")

    def internal_stats(self) -> dict[str, Any]:
        """The topic's managed-ledger stats (its ledgers and their entry counts)."""
        stats: dict[str, Any] = self._admin_get("internalStats").json()
        return stats

    def has_checkpoints(self) -> bool:
        """Whether the map's checkpoint topic exists (asked without creating it)."""
        try:
            self._admin_get("stats", topic=checkpoint_topic(self.topic))
        except ValueError:  # 404
            return False
        return True

    def _admin_get(self, what: str, *, topic: str | None = None) -> requests.Response:
        endpoint = self.admin_endpoint()
        url = f"{self.admin_url}/admin/v2/{topic_path(topic or self.topic)}/{what}"
        # a broker that does not own the topic redirects to its owner: followed
        # with the credentials, within the cluster (pulsar_state.cluster.session)
        settings: dict[str, Any] = {
            "verify": endpoint.verify(),
            "cert": endpoint.client_cert,
            "timeout": self.timeout_ms / 1000,
        }
        try:
            with ClusterSession(self.admin_url) as session:
                session.auth = endpoint.requests_auth()  # OAuth 2.0: a bearer token per call
                session.use_for_listing(**settings)
                resp = session.get(url, headers=endpoint.headers, **settings)
        except requests.exceptions.SSLError as exc:
            raise ConnectionError(
                f"pulsar_state: the TLS handshake with the Pulsar admin API at {self.admin_url} "
                f"failed ({exc}): {_TRUST_HINT}"
            ) from None
        except requests.RequestException as exc:
            raise ConnectionError(
                f"pulsar_state: the Pulsar admin API at {self.admin_url} is unreachable ({exc})"
            ) from None
        refused = refused_redirect(resp)
        if refused is not None:
            raise PermissionError(
                f"pulsar_state: the admin API at {self.admin_url} redirected the read of "
                f"{topic or self.topic} to {refused}, which is not a broker of its cluster: "
                "this source's credentials are not sent there"
            )
        if resp.status_code == 404:
            raise ValueError(f"pulsar_state: topic {topic or self.topic} does not exist")
        if resp.status_code == 401:
            raise PermissionError(
                f"pulsar_state: not allowed to read {self.topic}: the admin API at "
                f"{self.admin_url} did not accept this source's credentials (give them with "
                "authToken, or authPlugin and authParams, e.g. a TLS client certificate)"
            )
        if resp.status_code == 403:
            raise PermissionError(f"pulsar_state: not allowed to read {self.topic} (403)")
        if resp.status_code != 200:
            detail = f"{resp.status_code}: {resp.text[:200]}"
            raise ConnectionError(f"pulsar_state: checking {self.topic} failed ({detail})")
        return resp

    def admin_endpoint(self) -> AdminEndpoint:
        """The admin API with these options' credentials and trust."""
        return self.auth.admin_endpoint(self.admin_url)

    def last_position(self) -> Position:
        """The topic's last message id, from the admin API (``lastMessageId``):
        a read that makes no subscription, so an unload in its way leaves nothing
        behind; transient failures (an unload, a broker restart) are tried again
        within ``timeoutMs``.

        Returns:
            The position of the topic's last message (``entry == -1``: empty).

        Raises:
            ValueError: the topic does not exist.
            PermissionError: this source's credentials may not read it.
            ConnectionError: the admin API did not answer within ``timeoutMs``.
        """
        budget_s = max(1.0, self.timeout_ms / 1000)
        admin = self.admin_endpoint().admin(timeout_s=min(10.0, budget_s), retry_s=budget_s)
        try:
            return admin.last_message_id(self.topic)
        except TopicNotFoundError:
            raise ValueError(f"pulsar_state: topic {self.topic} does not exist") from None
        except PermissionDeniedError as exc:
            raise PermissionError(
                f"pulsar_state: not allowed to read {self.topic}: {exc}"
            ) from None
        except PulsarStateError as exc:
            raise ConnectionError(
                f"pulsar_state: no last position of {self.topic} from the admin API at "
                f"{self.admin_url} within timeoutMs={self.timeout_ms} ({exc})"
            ) from None
        finally:
            admin.close()

    def codec(self) -> MapCodec[str, Any]:
        return MapCodec(StrKeySerde(), _FORMATS[self.value_format])

    def value_type(self) -> str:
        return "binary" if self.value_format == "binary" else "string"

    def value_of(self, payload: bytes) -> Any:
        return payload if self.value_format == "binary" else payload.decode()


def source_schema(opts: SourceOptions) -> str:
    value = opts.value_type()
    if opts.mode == "changelog":
        return (
            f"key string, value {value}, change_type string, position string, "
            "publish_time timestamp, ledger_id long, entry_id long, batch_index int"
        )
    extra = ", position string, publish_time timestamp" if opts.include_metadata else ""
    return f"key string, value {value}{extra}"
