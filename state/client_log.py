"""The Pulsar C++ client's own log: one level for every client a process opens."""

from __future__ import annotations

import pulsar

__all__ = ["client_logger", "set_client_log_level"]

_CLIENT_LOG_LEVEL = [pulsar.LoggerLevel.Error]


def set_client_log_level(verbose: int) -> None:
    """The C++ client's own log: errors only unless ``verbose >= 2`` (``-vv``)."""
    _CLIENT_LOG_LEVEL[0] = pulsar.LoggerLevel.Debug if verbose >= 2 else pulsar.LoggerLevel.Error


def client_logger() -> pulsar.ConsoleLogger:
    """The client's native logger (to stderr).

    Not a Python logger: the C++ client may log from its own threads while the
    interpreter shuts down, which aborts the process ("terminate called without
    an active exception", pulsar-client-python issue 256).
    """
    return pulsar.ConsoleLogger(_CLIENT_LOG_LEVEL[0])
