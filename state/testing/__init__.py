"""A real Pulsar for your own tests: :class:`EmbeddedPulsar` and :class:`EmbeddedCluster`.

``EmbeddedPulsar`` starts the project's embedded standalone
(:class:`pulsar_state.deploy.standalone.StandaloneBroker`) on a data directory
and stops it again. When ``PULSAR_STATE_TEST_SERVICE_URL`` and
``PULSAR_STATE_TEST_ADMIN_URL`` are both set it starts nothing and hands out
those URLs instead (a cluster you already run, e.g. in CI; never the CLI's
``PULSAR_SERVICE_URL``, which may name a cluster your tests must not write to).
No pytest plugin is registered; a session fixture is a few lines::

    import pulsar
    import pytest
    from pulsar_state import PulsarMap
    from pulsar_state.testing import EmbeddedPulsar

    @pytest.fixture(scope="session")
    def pulsar_urls(tmp_path_factory):
        with EmbeddedPulsar(data_dir=tmp_path_factory.mktemp("pulsar")) as broker:
            yield broker.service_url, broker.admin_url

    def test_config(pulsar_urls):
        service_url, admin_url = pulsar_urls
        client = pulsar.Client(service_url)
        with PulsarMap(client, "persistent://public/default/cfg", admin_url=admin_url) as m:
            m.put("k", 1).result(30)
        client.close()

``EmbeddedCluster`` starts a real multi-broker cluster instead
(:class:`pulsar_state.deploy.cluster.LocalCluster`: one ZooKeeper, 1-3 bookies,
1-5 brokers, optionally with token authentication and TLS), for tests of what
only a cluster shows: a topic moving to another broker, a broker crash,
redirects between brokers. It hands out each broker's URLs, the super-user's
token, a client factory, and the faults::

    from pulsar_state.testing import EmbeddedCluster

    @pytest.fixture(scope="session")
    def cluster(tmp_path_factory):
        with EmbeddedCluster(data_dir=tmp_path_factory.mktemp("cluster"), auth="token") as c:
            yield c

    def test_failover(cluster):
        client = cluster.client()              # every broker's URL, the super-user's token
        admin_0, admin_1 = cluster.admin_urls  # broker 0's and broker 1's admin URL
        cluster.kill_broker(0)                 # SIGKILL; its topics move after ~30 s
        cluster.start_broker(0)                # back, healthy and listed
        cluster.restart_broker(1)              # SIGTERM (it hands its topics over), start

With ``tls=True`` every broker also serves TLS: ``tls_service_url``,
``tls_admin_urls`` and ``ca_file`` (the throwaway CA to trust), and under
``auth="token"`` ``client_cert(role)`` gives a TLS client certificate that
authenticates instead of a token.

The first start needs the Pulsar distribution (fetched once with Maven into the
user cache, as ``pulsar-state broker start`` does) and Java 17 or newer. Two
brokers and a bookie take about 1.3 GB of memory.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import Any

import pulsar

from pulsar_state.deploy.cluster import ClusterInfo, LocalCluster
from pulsar_state.deploy.errors import BrokerNotRunningError
from pulsar_state.deploy.standalone import StandaloneBroker
from pulsar_state.errors import ConfigurationError

__all__ = ["EmbeddedCluster", "EmbeddedPulsar"]

SERVICE_URL_ENV = "PULSAR_STATE_TEST_SERVICE_URL"
ADMIN_URL_ENV = "PULSAR_STATE_TEST_ADMIN_URL"


class EmbeddedPulsar:
    """A Pulsar broker for tests: an embedded standalone, or the one in the environment.

    Args:
        data_dir: where the embedded standalone keeps its data (required unless
            ``PULSAR_STATE_TEST_SERVICE_URL`` and ``PULSAR_STATE_TEST_ADMIN_URL``
            are set; never the CLI's ``PULSAR_SERVICE_URL``, which may name a
            cluster your tests must not write to).
        functions: run the functions worker too (slower to start, more memory).
        fresh: start on empty data (a previous run's topics are gone).
        start_timeout_s: how long :meth:`start` waits for the broker to be ready.
        broker_settings: extra ``standalone.conf`` settings.

    Raises:
        ConfigurationError: bad arguments, only one of the two URL variables
            set, or no ``data_dir`` without them.
    """

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        functions: bool = False,
        fresh: bool = True,
        start_timeout_s: float = 240.0,
        broker_settings: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(functions, bool):
            raise ConfigurationError(f"functions must be a bool, got {functions!r}")
        if not isinstance(fresh, bool):
            raise ConfigurationError(f"fresh must be a bool, got {fresh!r}")
        if (
            isinstance(start_timeout_s, bool)
            or not isinstance(start_timeout_s, int | float)
            or not start_timeout_s > 0
        ):
            raise ConfigurationError(f"start_timeout_s must be > 0, got {start_timeout_s!r}")
        if broker_settings is not None and not (
            isinstance(broker_settings, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in broker_settings.items())
        ):
            raise ConfigurationError(
                f"broker_settings must map str to str, got {broker_settings!r}"
            )
        service_url = os.environ.get(SERVICE_URL_ENV) or None
        admin_url = os.environ.get(ADMIN_URL_ENV) or None
        if bool(service_url) != bool(admin_url):
            raise ConfigurationError(
                f"{SERVICE_URL_ENV} and {ADMIN_URL_ENV} must both be set, or neither"
            )
        self._env_urls: tuple[str, str] | None = (
            (service_url, admin_url) if service_url and admin_url else None
        )
        if self._env_urls is None and data_dir is None:
            raise ConfigurationError(
                f"data_dir is required unless {SERVICE_URL_ENV} and {ADMIN_URL_ENV} are set"
            )
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.functions = functions
        self.fresh = fresh
        self._broker: StandaloneBroker | None = None
        if self._env_urls is None:
            assert self.data_dir is not None
            self._broker = StandaloneBroker(
                data_dir=self.data_dir,
                functions=functions,
                start_timeout_s=start_timeout_s,
                broker_settings=broker_settings,
            )
        self._urls: tuple[str, str] | None = None

    @property
    def external(self) -> bool:
        """True when the URLs come from the environment (nothing is started)."""
        return self._env_urls is not None

    @property
    def service_url(self) -> str:
        return self._require_urls()[0]

    @property
    def admin_url(self) -> str:
        return self._require_urls()[1]

    def _require_urls(self) -> tuple[str, str]:
        if self._urls is None:
            raise BrokerNotRunningError("EmbeddedPulsar is not started: call start() first")
        return self._urls

    def start(self) -> EmbeddedPulsar:
        """Start the broker (or take the environment's URLs); return ``self``.

        Raises:
            BrokerStartError: the standalone did not become ready in time.
        """
        if self._env_urls is not None:
            self._urls = self._env_urls
            return self
        assert self._broker is not None
        if self.fresh:
            self._broker.stop()  # a broker left by an interrupted run on this data dir
        info = self._broker.start(fresh=self.fresh)
        self._urls = (info.service_url, info.admin_url)
        return self

    def stop(self) -> None:
        """Stop the broker this object started; nothing in environment mode."""
        self._urls = None
        if self._broker is not None:
            self._broker.stop()

    def __enter__(self) -> EmbeddedPulsar:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = "environment" if self.external else f"data_dir={self.data_dir}"
        state = f"service_url={self._urls[0]}" if self._urls else "stopped"
        return f"EmbeddedPulsar({where}, {state})"


class EmbeddedCluster:
    """A multi-broker Pulsar cluster for tests (:class:`~pulsar_state.deploy.cluster.LocalCluster`).

    Args:
        data_dir: where the cluster keeps its data, logs, tokens and pids.
        brokers: brokers to run, 1..5.
        bookies: bookies to run, 1..3.
        auth: ``None`` or ``"token"`` (JWT authentication and authorization).
        functions: run a functions worker inside each broker.
        tls: each broker also serves TLS with a certificate of the cluster's own
            CA; under ``auth="token"`` TLS client certificates authenticate too.
        fresh: start on empty data (a previous run's topics and tokens are gone).
        start_timeout_s: how long each step of the start may take.
        broker_settings: extra ``broker.conf`` settings of every broker.

    Raises:
        ConfigurationError: a value out of range (see :class:`LocalCluster`).
        TypeError: a value of the wrong type.
    """

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike[str],
        brokers: int = 2,
        bookies: int = 1,
        auth: str | None = None,
        functions: bool = False,
        tls: bool = False,
        fresh: bool = True,
        start_timeout_s: float = 240.0,
        broker_settings: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(fresh, bool):
            raise ConfigurationError(f"fresh must be a bool, got {fresh!r}")
        self.fresh = fresh
        self.cluster = LocalCluster(
            data_dir=data_dir,
            brokers=brokers,
            bookies=bookies,
            auth=auth,
            functions=functions,
            tls=tls,
            start_timeout_s=start_timeout_s,
            broker_settings=broker_settings,
        )
        self._info: ClusterInfo | None = None

    @property
    def info(self) -> ClusterInfo:
        """The running cluster's names, URLs and token.

        Raises:
            BrokerNotRunningError: :meth:`start` was not called.
        """
        if self._info is None:
            raise BrokerNotRunningError("EmbeddedCluster is not started: call start() first")
        return self._info

    @property
    def service_urls(self) -> tuple[str, ...]:
        """Each broker's ``pulsar://`` URL, broker 0 first."""
        return self.info.service_urls

    @property
    def admin_urls(self) -> tuple[str, ...]:
        """Each broker's admin URL, broker 0 first."""
        return self.info.admin_urls

    @property
    def service_url(self) -> str:
        """One service URL naming every broker."""
        return self.info.service_url

    @property
    def admin_url(self) -> str:
        """Broker 0's admin URL."""
        return self.info.admin_urls[0]

    @property
    def superuser_token(self) -> str | None:
        """The super-user's token with ``auth="token"``, else ``None``."""
        return self.info.superuser_token

    @property
    def tls_service_urls(self) -> tuple[str, ...]:
        """Each broker's ``pulsar+ssl://`` URL, broker 0 first; empty without TLS."""
        return self.info.tls_service_urls

    @property
    def tls_admin_urls(self) -> tuple[str, ...]:
        """Each broker's ``https://`` admin URL, broker 0 first; empty without TLS."""
        return self.info.tls_admin_urls

    @property
    def tls_service_url(self) -> str | None:
        """One ``pulsar+ssl://`` URL naming every broker; ``None`` without TLS."""
        return self.info.tls_service_url

    @property
    def ca_file(self) -> str | None:
        """The CA certificate to trust over TLS; ``None`` without TLS."""
        return self.info.ca_file

    def client_cert(self, role: str = "admin") -> tuple[str, str]:
        """The TLS client certificate and key files of ``role`` (default: the
        super-user), for ``AdminEndpoint(client_cert=...)`` or ``--auth-plugin tls``.

        Raises:
            ConfigurationError: ``role`` is not a plain name.
            BrokerNotRunningError: the cluster does not use TLS.
        """
        cert, key = self.cluster.client_certificate(role)
        return str(cert), str(key)

    def token(self, role: str) -> str:
        """A token for ``role`` (it has only the permissions granted to it).

        Raises:
            ConfigurationError: ``role`` is not a plain name.
            BrokerNotRunningError: the cluster does not use token authentication.
        """
        return self.cluster.token(role)

    def client(
        self, broker: int | None = None, *, tls: bool = False, **kwargs: Any
    ) -> pulsar.Client:
        """A ``pulsar.Client`` of broker ``broker`` (default: every broker),
        authenticated as the super-user under auth; ``tls``: over ``pulsar+ssl://``,
        trusting the cluster's CA; ``kwargs`` go to the client.

        Raises:
            BrokerNotRunningError: ``tls`` on a cluster without TLS.
        """
        if tls:
            if self.tls_service_url is None or self.ca_file is None:
                raise BrokerNotRunningError(
                    "the cluster does not serve TLS: start it with tls=True"
                )
            url = self.tls_service_url if broker is None else self.tls_service_urls[broker]
            kwargs.setdefault("tls_trust_certs_file_path", self.ca_file)
        else:
            url = self.service_url if broker is None else self.service_urls[broker]
        token = self.superuser_token
        if token is not None:
            kwargs.setdefault("authentication", pulsar.AuthenticationToken(token))
        return pulsar.Client(url, **kwargs)

    def kill_broker(self, index: int) -> None:
        """SIGKILL broker ``index`` (see :meth:`LocalCluster.kill_broker`)."""
        self.cluster.kill_broker(index)

    def start_broker(self, index: int) -> None:
        """Start broker ``index`` again and wait until it is ready."""
        self.cluster.start_broker(index)

    def restart_broker(self, index: int) -> None:
        """Stop broker ``index`` cleanly, start it again and wait until it is ready
        (see :meth:`LocalCluster.restart_broker`)."""
        self.cluster.restart_broker(index)

    def start(self) -> EmbeddedCluster:
        """Start the cluster; return ``self``.

        Raises:
            BrokerStartError: a process exited or was not ready in time.
        """
        if self.fresh:
            self.cluster.stop()  # a cluster left by an interrupted run on this data dir
        self._info = self.cluster.start(fresh=self.fresh)
        return self

    def stop(self) -> None:
        """Stop every process of the cluster."""
        self._info = None
        self.cluster.stop()

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"service_url={self._info.service_url}" if self._info else "stopped"
        return f"EmbeddedCluster(data_dir={self.cluster.data_dir}, {state})"
