"""``pulsar_state.testing.EmbeddedPulsar`` for users' own suites (issue #15).

With ``PULSAR_STATE_TEST_SERVICE_URL``/``PULSAR_STATE_TEST_ADMIN_URL`` set it starts nothing and a
map works through its URLs (the session's broker stands in for "a cluster you
already run"); its configuration is validated up front. No extra standalone is
started here: the session already runs one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_topic

from pulsar_state import PulsarMap
from pulsar_state.deploy.errors import BrokerNotRunningError
from pulsar_state.deploy.standalone import StandaloneBroker
from pulsar_state.errors import ConfigurationError, PulsarStateError
from pulsar_state.testing import EmbeddedPulsar


def test_environment_mode_starts_nothing_and_a_map_works(
    pulsar_endpoint: PulsarEndpoint, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PULSAR_STATE_TEST_SERVICE_URL", pulsar_endpoint.service_url)
    monkeypatch.setenv("PULSAR_STATE_TEST_ADMIN_URL", pulsar_endpoint.admin_url)
    data_dir = tmp_path / "unused"
    with EmbeddedPulsar(data_dir=data_dir) as broker:
        assert broker.external
        assert broker.service_url == pulsar_endpoint.service_url
        assert broker.admin_url == pulsar_endpoint.admin_url
        client = pulsar.Client(broker.service_url)
        try:
            with PulsarMap[str, Any](
                client, unique_topic("testing-helper"), admin_url=broker.admin_url
            ) as m:
                m.put("k", {"v": 1}).result(60)
                assert m.get("k", latest=True).result(60) == {"v": 1}
        finally:
            client.close()
    # nothing was started: no broker files in the data dir, and after stop no URLs
    assert not data_dir.exists()
    assert StandaloneBroker(data_dir=data_dir).status() is None
    with pytest.raises(BrokerNotRunningError):
        _ = broker.service_url


def _without_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PULSAR_STATE_TEST_SERVICE_URL", raising=False)
    monkeypatch.delenv("PULSAR_STATE_TEST_ADMIN_URL", raising=False)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"functions": "yes"},
        {"fresh": 1},
        {"start_timeout_s": 0},
        {"start_timeout_s": True},
        {"broker_settings": {"a": 1}},
    ],
)
def test_bad_configuration_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kwargs: dict[str, Any]
) -> None:
    _without_env(monkeypatch)
    with pytest.raises(ConfigurationError) as err:
        EmbeddedPulsar(data_dir=tmp_path, **kwargs)
    assert isinstance(err.value, PulsarStateError)


def test_data_dir_is_required_without_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_env(monkeypatch)
    with pytest.raises(ConfigurationError, match="data_dir is required"):
        EmbeddedPulsar()


def test_only_one_url_variable_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _without_env(monkeypatch)
    monkeypatch.setenv("PULSAR_STATE_TEST_SERVICE_URL", "pulsar://127.0.0.1:6650")
    with pytest.raises(ConfigurationError, match="must both be set"):
        EmbeddedPulsar(data_dir=tmp_path)


def test_urls_before_start_are_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _without_env(monkeypatch)
    broker = EmbeddedPulsar(data_dir=tmp_path)
    assert not broker.external
    with pytest.raises(BrokerNotRunningError):
        _ = broker.admin_url


def test_config_is_keyword_only(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        EmbeddedPulsar(tmp_path)  # type: ignore[call-arg]
