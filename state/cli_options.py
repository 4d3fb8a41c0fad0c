"""Options shared by the ``pulsar-state`` commands that talk to a cluster."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["cluster_options"]

F = TypeVar("F", bound=Callable[..., Any])


def cluster_options(fn: F) -> F:
    """``--service-url`` and ``--admin-url``, with ``PULSAR_SERVICE_URL``/``PULSAR_ADMIN_URL``."""
    fn = click.option(
        "--admin-url",
        envvar="PULSAR_ADMIN_URL",
        default="http://127.0.0.1:8080",
        show_default=True,
        help="Admin URL (env PULSAR_ADMIN_URL).",
    )(fn)
    fn = click.option(
        "--service-url",
        envvar="PULSAR_SERVICE_URL",
        default="pulsar://127.0.0.1:6650",
        show_default=True,
        help="Broker URL (env PULSAR_SERVICE_URL).",
    )(fn)
    return fn
