"""Options shared by the ``pulsar-state`` commands that talk to a cluster."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import click
import pulsar

from pulsar_state.errors import StateTopicError
from pulsar_state.manager import full_topic_name
from pulsar_state.op_codec import OpCodec
from pulsar_state.topic_view import TopicView

__all__ = [
    "TopicMissingError",
    "admin_headers",
    "cluster_client",
    "cluster_options",
    "read_only_view",
    "topic_callback",
]

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S")
Op = TypeVar("Op")


def cluster_options(fn: F) -> F:
    """``--service-url``, ``--admin-url`` and ``--auth-token``, with ``PULSAR_SERVICE_URL``,
    ``PULSAR_ADMIN_URL`` and ``PULSAR_AUTH_TOKEN``."""
    fn = click.option(
        "--auth-token",
        envvar="PULSAR_AUTH_TOKEN",
        default=None,
        help="JWT for the broker and the admin API (env PULSAR_AUTH_TOKEN).",
    )(fn)
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


_CLIENT_LOG_LEVEL = [pulsar.LoggerLevel.Error]


def set_client_log_level(verbose: int) -> None:
    """The C++ client's own log: errors only unless ``-vv``."""
    _CLIENT_LOG_LEVEL[0] = pulsar.LoggerLevel.Debug if verbose >= 2 else pulsar.LoggerLevel.Error


def client_logger() -> pulsar.ConsoleLogger:
    """The client's native logger (to stderr).

    Not a Python logger: the C++ client may log from its own threads while the
    interpreter shuts down, which aborts the process ("terminate called without
    an active exception", pulsar-client-python issue 256).
    """
    return pulsar.ConsoleLogger(_CLIENT_LOG_LEVEL[0])


def topic_callback(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """``--topic``'s callback: the full topic name, or a usage error."""
    try:
        return full_topic_name(value)
    except StateTopicError as exc:
        raise click.BadParameter(str(exc)) from exc


class TopicMissingError(click.ClickException):
    """A read of a topic that does not exist: exit code 3 (reads never create one)."""

    exit_code = 3


def admin_headers(auth_token: str | None) -> dict[str, str] | None:
    return {"Authorization": f"Bearer {auth_token}"} if auth_token else None


@contextlib.contextmanager
def cluster_client(
    service_url: str, timeout_s: float = 30.0, auth_token: str | None = None
) -> Iterator[pulsar.Client]:
    """A client for one command; a bad URL is a clear CLI error; closed afterwards."""
    try:
        client = pulsar.Client(
            service_url,
            authentication=pulsar.AuthenticationToken(auth_token) if auth_token else None,
            operation_timeout_seconds=max(1, int(timeout_s)),
            logger=client_logger(),
        )
    except (pulsar.PulsarException, ValueError) as exc:
        raise click.ClickException(f"cannot use {service_url}: {exc}") from exc
    try:
        yield client
    finally:
        client.close()


@contextlib.contextmanager
def read_only_view(
    opts: Mapping[str, Any],
    *,
    timeout_s: float,
    errors: Callable[[], AbstractContextManager[None]],
    codec: OpCodec[Op],
    initializer: Callable[[], S],
    applier: Callable[[S, Op], Any],
) -> Iterator[TopicView[S, Op]]:
    """A read-only :class:`TopicView` of ``opts["topic"]`` for one command.

    ``opts`` holds the :func:`cluster_options` (``service_url``, ``admin_url``,
    ``auth_token``) and ``topic``. The client is opened first (a bad URL is a
    CLI error); ``errors()`` then covers the view's open and the caller's reads;
    the view and the client are closed afterwards.
    """
    with (
        cluster_client(opts["service_url"], timeout_s, opts["auth_token"]) as client,
        errors(),
        TopicView(
            client=client,
            topic=opts["topic"],
            codec=codec,
            initializer=initializer,
            applier=applier,
            admin_url=opts["admin_url"],
            admin_headers=admin_headers(opts["auth_token"]),
            timeout_s=timeout_s,
        ) as view,
    ):
        yield view
