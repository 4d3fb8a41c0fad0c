"""The launcher's exceptions: the embedded broker, ``pulsar-admin``, deployed functions.

They belong to :mod:`pulsar_state.deploy` (starting a standalone, running
``pulsar-admin``, waiting for deployed functions), not to the state core, and
derive from the project's one root, :class:`pulsar_state.errors.PulsarStateError`.
"""

from __future__ import annotations

from pulsar_state.errors import OperationTimeoutError, PulsarStateError

__all__ = [
    "BrokerError",
    "BrokerNotRunningError",
    "BrokerSetupError",
    "BrokerStartError",
    "FunctionNotReadyError",
    "PortInUseError",
    "PulsarAdminError",
]


# -- deployed functions ----------------------------------------------------------


class FunctionNotReadyError(OperationTimeoutError):
    """A deployed Pulsar Function did not run, subscribe or answer in time.

    ``function`` is its ``tenant/namespace/name``; ``log`` says where its
    instances' log is (a path on this machine, or where on the worker).
    """

    def __init__(self, message: str, *, function: str, log: str) -> None:
        self.function = function
        self.log = log
        super().__init__(f"{message} (function {function}; its log: {log})")


# -- the embedded broker -------------------------------------------------------


class BrokerError(PulsarStateError):
    """The embedded Pulsar standalone could not be obtained, started or reached.

    ``log_tail`` holds the last lines of the relevant log, when there is one.
    """

    def __init__(self, message: str, *, log_tail: str = "") -> None:
        self.log_tail = log_tail
        if log_tail:
            message = f"{message}\n--- last log lines ---\n{log_tail}"
        super().__init__(message)


class BrokerSetupError(BrokerError):
    """A prerequisite is missing (Java, Maven) or the distribution is unusable."""


class BrokerStartError(BrokerError):
    """The standalone process exited early or did not become ready in time."""

    retriable = True


class PortInUseError(BrokerStartError):
    """A port the standalone must listen on is taken by another process."""

    retriable = False

    def __init__(self, port: int, purpose: str) -> None:
        self.port = port
        self.purpose = purpose
        super().__init__(
            f"port {port} ({purpose}) on 127.0.0.1 is already in use by another process; "
            "stop that process or start the broker with another --data-dir"
        )


class BrokerNotRunningError(BrokerError):
    """No standalone started by this tool runs on the given data directory."""


class PulsarAdminError(PulsarStateError):
    """``pulsar-admin`` exited non-zero; ``output`` is what it printed."""

    def __init__(self, args: list[str], returncode: int, output: str) -> None:
        self.args_used = args
        self.returncode = returncode
        self.output = output
        super().__init__(
            f"pulsar-admin {' '.join(args[:3])} ... failed (exit {returncode}): "
            f"{output.strip()[-1500:]}"
        )
