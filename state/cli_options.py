"""Options shared by the ``pulsar-state`` commands that talk to a cluster."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click
import pulsar

__all__ = ["cluster_client", "cluster_options"]

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


@contextlib.contextmanager
def cluster_client(service_url: str, timeout_s: float = 30.0) -> Iterator[pulsar.Client]:
    """A client for one command; a bad URL is a clear CLI error; closed afterwards."""
    try:
        client = pulsar.Client(
            service_url,
            operation_timeout_seconds=max(1, int(timeout_s)),
            logger=logging.getLogger("pulsar.client"),
        )
    except (pulsar.PulsarException, ValueError) as exc:
        raise click.ClickException(f"cannot use {service_url}: {exc}") from exc
    try:
        yield client
    finally:
        client.close()
