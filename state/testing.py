"""A real Pulsar for your own tests: :class:`EmbeddedPulsar`.

``EmbeddedPulsar`` starts the project's embedded standalone
(:class:`pulsar_state.deploy.standalone.StandaloneBroker`) on a data directory
and stops it again. When ``PULSAR_SERVICE_URL`` and ``PULSAR_ADMIN_URL`` are
both set it starts nothing and hands out those URLs instead (a cluster you
already run, e.g. in CI). No pytest plugin is registered; a session fixture is
a few lines::

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

The first start needs the Pulsar distribution (fetched once with Maven into the
user cache, as ``pulsar-state broker start`` does) and Java 17 or newer.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from pulsar_state.deploy.errors import BrokerNotRunningError
from pulsar_state.deploy.standalone import StandaloneBroker
from pulsar_state.errors import ConfigurationError

__all__ = ["EmbeddedPulsar"]

SERVICE_URL_ENV = "PULSAR_SERVICE_URL"
ADMIN_URL_ENV = "PULSAR_ADMIN_URL"


class EmbeddedPulsar:
    """A Pulsar broker for tests: an embedded standalone, or the one in the environment.

    Args:
        data_dir: where the embedded standalone keeps its data (required unless
            ``PULSAR_SERVICE_URL`` and ``PULSAR_ADMIN_URL`` are set).
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
