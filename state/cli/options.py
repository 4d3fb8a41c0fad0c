"""The options every ``pulsar-state`` command spells the same way, and what reads them.

One set: the cluster's URLs (:func:`cluster_options`), authentication and TLS
(:func:`auth_options`), their defaults from a ``client.conf`` named by
``PULSAR_CLIENT_CONF`` (:mod:`.client_conf`), ``--timeout`` (:func:`timeout_option`: seconds each
operation of the command may take, 30 by default) and ``--output text|json``
(:func:`output_option`: text by default, as the commands always printed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import click
import pulsar

from pulsar_state.cli.client_conf import conf_default, conf_flag
from pulsar_state.client_log import client_logger
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.cluster.oauth2 import OAuth2Params
from pulsar_state.core.log.view import TopicView
from pulsar_state.core.op_codec import OpCodec
from pulsar_state.errors import ConfigurationError, StateTopicError
from pulsar_state.topic_names import full_topic_name

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "admin_endpoint",
    "auth_options",
    "cluster_auth",
    "cluster_client",
    "cluster_options",
    "output_option",
    "read_only_view",
    "timeout_option",
    "topic_callback",
]

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S")
Op = TypeVar("Op")

#: ``--timeout``'s default: seconds each operation of a command may take
DEFAULT_TIMEOUT_S = 30.0


def timeout_option(fn: F) -> F:
    """``--timeout S``: seconds each operation (open, read, write) may take; > 0, 30 by default.

    A value <= 0 is a usage error (exit code 2).
    """
    return click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        help="Seconds each operation (open, read, write) may take.",
    )(fn)


def output_option(fn: F) -> F:
    """``--output text|json`` (also spelled ``--format``), passed as ``fmt``; text by default."""
    return click.option(
        "--output",
        "--format",
        "fmt",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="text as always, or JSON (one value or one object a line).",
    )(fn)


def auth_options(fn: F) -> F:
    """Authentication and TLS trust, spelled as ``pulsar-admin`` and ``pulsar-client`` spell them.

    ``--auth-plugin`` / ``--auth-params`` (env ``PULSAR_AUTH_PLUGIN`` /
    ``PULSAR_AUTH_PARAMS``), the shorthand ``--auth-token`` (``PULSAR_AUTH_TOKEN``),
    ``--tls-trust-cert-path`` (``PULSAR_TLS_TRUST_CERT_PATH``), ``--tls-allow-insecure``
    (``PULSAR_TLS_ALLOW_INSECURE``) and ``--tls-enable-hostname-verification``
    (``PULSAR_TLS_ENABLE_HOSTNAME_VERIFICATION``). :func:`cluster_auth` reads them.
    """
    options = [
        click.option(
            "--auth-token",
            envvar="PULSAR_AUTH_TOKEN",
            default=None,
            help="JWT for the broker and the admin API (env PULSAR_AUTH_TOKEN); "
            "short for --auth-plugin token --auth-params token:JWT.",
        ),
        click.option(
            "--auth-plugin",
            envvar="PULSAR_AUTH_PLUGIN",
            default=conf_default("auth_plugin", None),
            help="token, basic, tls, oauth2, or the plugin's class name as in client.conf "
            "(env PULSAR_AUTH_PLUGIN).",
        ),
        click.option(
            "--auth-params",
            envvar="PULSAR_AUTH_PARAMS",
            default=conf_default("auth_params", None),
            help="The plugin's parameters, e.g. token:JWT, file:///path/to/token, "
            "tlsCertFile:/c.pem,tlsKeyFile:/k.pem (env PULSAR_AUTH_PARAMS).",
        ),
        click.option(
            "--tls-trust-cert-path",
            envvar="PULSAR_TLS_TRUST_CERT_PATH",
            type=click.Path(exists=True, dir_okay=False),
            default=conf_default("tls_trust_cert_path", None),
            help="CA certificates that sign the cluster's (env PULSAR_TLS_TRUST_CERT_PATH).",
        ),
        click.option(
            "--tls-allow-insecure",
            envvar="PULSAR_TLS_ALLOW_INSECURE",
            is_flag=True,
            default=conf_flag("tls_allow_insecure"),
            help="Accept any server certificate (env PULSAR_TLS_ALLOW_INSECURE).",
        ),
        click.option(
            "--tls-enable-hostname-verification",
            envvar="PULSAR_TLS_ENABLE_HOSTNAME_VERIFICATION",
            is_flag=True,
            default=conf_flag("tls_enable_hostname_verification"),
            help="Check the broker's host name against its certificate "
            "(env PULSAR_TLS_ENABLE_HOSTNAME_VERIFICATION).",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def cluster_options(fn: F) -> F:
    """``--service-url`` and ``--admin-url`` (env ``PULSAR_SERVICE_URL``,
    ``PULSAR_ADMIN_URL``) and the :func:`auth_options`."""
    fn = auth_options(fn)
    fn = click.option(
        "--admin-url",
        envvar="PULSAR_ADMIN_URL",
        default=conf_default("admin_url", "http://127.0.0.1:8080"),
        show_default="client.conf's webServiceUrl, else http://127.0.0.1:8080",
        help="Admin URL (env PULSAR_ADMIN_URL).",
    )(fn)
    fn = click.option(
        "--service-url",
        envvar="PULSAR_SERVICE_URL",
        default=conf_default("service_url", "pulsar://127.0.0.1:6650"),
        show_default="client.conf's brokerServiceUrl, else pulsar://127.0.0.1:6650",
        help="Broker URL (env PULSAR_SERVICE_URL).",
    )(fn)
    return fn


def cluster_auth(opts: Mapping[str, Any]) -> ClusterAuth:
    """The :func:`auth_options` of a command as a :class:`ClusterAuth`; bad ones are usage errors.

    Commands hand it whole to each admin client they open (:func:`admin_endpoint`): its
    trust bundle wins over an environment's ``REQUESTS_CA_BUNDLE``.

    An authentication given on the command line or in the environment replaces
    the whole one of ``client.conf`` (:mod:`.client_conf`).
    """
    opts = _without_conf_auth_under(opts)
    try:
        auth = ClusterAuth.from_options(opts)
        # an unusable combination fails here, not mid-command
        auth.admin_headers()
        auth.admin_client_cert()
        if auth.kind == "oauth2":
            OAuth2Params.parse(auth.auth_params or "")
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc
    return auth


def _without_conf_auth_under(opts: Mapping[str, Any]) -> Mapping[str, Any]:
    """``opts`` without ``client.conf``'s plugin and parameters when a token or a
    plugin came from the command line or the environment."""
    ctx = click.get_current_context(silent=True)

    def source(name: str) -> click.core.ParameterSource | None:
        at = ctx  # the options may belong to a parent group (``map --admin-url ... put``)
        while at is not None:
            found = at.get_parameter_source(name)
            if found is not None:
                return found
            at = at.parent
        return None

    default = click.core.ParameterSource.DEFAULT
    explicit = any(
        opts.get(name) and source(name) not in (default, None)
        for name in ("auth_token", "auth_plugin")
    )
    if not explicit:
        return opts
    return {**opts, **{n: None for n in ("auth_plugin", "auth_params") if source(n) is default}}


def topic_callback(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """``--topic``'s callback: the full topic name, or a usage error."""
    try:
        return full_topic_name(value)
    except StateTopicError as exc:
        raise click.BadParameter(str(exc)) from exc


def _auth(auth: ClusterAuth | str | None) -> ClusterAuth:
    if isinstance(auth, ClusterAuth):
        return auth
    return ClusterAuth(auth_token=auth or None)


def admin_endpoint(opts: Mapping[str, Any], auth: ClusterAuth | None = None) -> AdminEndpoint:
    """The admin API of a command's ``--admin-url`` with its ``--auth-*`` credentials (a
    token or basic header, a TLS client certificate) and ``--tls-*`` trust, in one value;
    a bad setting is a usage error.

    ``auth``: the command's :func:`cluster_auth` if already made.
    """
    auth = auth if auth is not None else cluster_auth(opts)
    try:
        return auth.admin_endpoint(opts["admin_url"])
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc


@contextlib.contextmanager
def cluster_client(
    service_url: str, timeout_s: float = DEFAULT_TIMEOUT_S, auth: ClusterAuth | str | None = None
) -> Iterator[pulsar.Client]:
    """A client for one command; a bad URL is a clear CLI error; closed afterwards.

    ``auth``: a :class:`ClusterAuth` (see :func:`cluster_auth`), or a bare token.
    """
    try:
        client = pulsar.Client(
            service_url,
            operation_timeout_seconds=max(1, int(timeout_s)),
            logger=client_logger(),
            **_auth(auth).client_kwargs(),
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
    codec: OpCodec[Op],
    initializer: Callable[[], S],
    applier: Callable[[S, Op], Any],
) -> Iterator[TopicView[S, Op]]:
    """A read-only :class:`TopicView` of ``opts["topic"]`` for one command.

    ``opts`` holds the :func:`cluster_options` (``service_url``, ``admin_url``,
    the :func:`auth_options`) and ``topic``. The client is opened first (a bad URL is a
    CLI error); the view and the client are closed afterwards.
    """
    auth = cluster_auth(opts)
    with (
        cluster_client(opts["service_url"], timeout_s, auth) as client,
        TopicView(
            client=client,
            topic=opts["topic"],
            codec=codec,
            initializer=initializer,
            applier=applier,
            admin=admin_endpoint(opts, auth),
            timeout_s=timeout_s,
        ) as view,
    ):
        yield view
