"""pulsar-shared-state: consistent shared state on Apache Pulsar."""

from pulsar_state.errors import (
    BrokerError,
    BrokerNotRunningError,
    BrokerSetupError,
    BrokerStartError,
    ConfigurationError,
    PortInUseError,
    PulsarAdminError,
    PulsarStateError,
)

__all__ = [
    # Errors
    "BrokerError",
    "BrokerNotRunningError",
    "BrokerSetupError",
    "BrokerStartError",
    "ConfigurationError",
    "PortInUseError",
    "PulsarAdminError",
    "PulsarStateError",
]
