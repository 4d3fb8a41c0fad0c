"""The package's seams, checked over its source: who may import whom, where names live."""

from __future__ import annotations

import pulsar_state
from pulsar_state.deploy import errors as deploy_errors
from pulsar_state.errors import PulsarStateError

LAUNCHER_ERRORS = (
    "BrokerError",
    "BrokerNotRunningError",
    "BrokerSetupError",
    "BrokerStartError",
    "FunctionNotReadyError",
    "PortInUseError",
    "PulsarAdminError",
)


def test_launcher_errors_live_with_the_launcher_under_the_one_root() -> None:
    for name in LAUNCHER_ERRORS:
        error = getattr(deploy_errors, name)
        assert issubclass(error, PulsarStateError), name
        assert error.__module__ == "pulsar_state.deploy.errors", name
        assert name not in pulsar_state.__all__, f"{name} is exported by the state core"
        assert not hasattr(pulsar_state.errors, name), f"{name} is in the core's error module"
