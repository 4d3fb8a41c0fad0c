"""``pulsar-state deploy|undeploy|package``: the packaged functions onto any cluster.

What they do is in :mod:`~pulsar_state.deploy.functions_deploy` (the configs,
the packages, the admin clients); here are the options.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from pulsar_state.cli.options import auth_options, cluster_auth
from pulsar_state.deploy.functions_deploy import (
    ADMIN_CLIENTS,
    build_packages,
    deploy_functions,
    function_names,
    undeploy_functions,
)

__all__ = ["deploy", "package", "undeploy"]

C = TypeVar("C", bound=Callable[..., Any])

_admin_option = click.option(
    "--admin-url",
    envvar="PULSAR_ADMIN_URL",
    required=True,
    help="The cluster's admin URL (env PULSAR_ADMIN_URL).",
)

_admin_client_option = click.option(
    "--admin-client",
    type=click.Choice(ADMIN_CLIENTS),
    envvar="PULSAR_STATE_ADMIN_CLIENT",
    default="rest",
    show_default=True,
    help="rest: the admin REST API, no Java needed; cli: the Pulsar distribution's "
    "bin/pulsar-admin (env PULSAR_STATE_ADMIN_CLIENT).",
)

#: which functions, where: shared by deploy and undeploy
_selection_options = [
    click.option(
        "--only",
        multiple=True,
        type=click.Choice(function_names()),
        help="Only this packaged function (repeat for more; default: all).",
    ),
    click.option(
        "--config",
        "config_files",
        multiple=True,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Your own function config (the shipped YAML format; its className picks "
        "the packaged code), instead of the shipped ones (repeat for more).",
    ),
    click.option("--tenant", help="Deploy into this tenant (the functions and their topics)."),
    click.option(
        "--namespace", help="Deploy into this namespace (the functions and their topics)."
    ),
]


def _with_selection(command: C) -> C:
    for option in reversed(_selection_options):
        command = option(command)
    return command


_worker_python_options = [
    click.option("--python-version", help="The workers' Python, e.g. 3.12 (default: this one)."),
    click.option("--platform", help="The workers' platform tag, e.g. manylinux2014_x86_64."),
]


def _with_worker_python(command: C) -> C:
    for option in reversed(_worker_python_options):
        command = option(command)
    return command


@click.command()
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("dist/functions"),
    show_default=True,
    help="Where the <function name>.zip packages go.",
)
@_with_worker_python
def package(out_dir: Path, python_version: str | None, platform: str | None) -> None:
    """Build a self-contained zip for each function (--py of functions create)."""
    for _, path in build_packages(out_dir, python_version, platform):
        click.echo(f"{path} ({path.stat().st_size // 1024} KiB)")


@click.command()
@_admin_option
@auth_options
@_admin_client_option
@click.option(
    "--code",
    type=click.Choice(["zip", "entry"]),
    default="zip",
    show_default=True,
    help="zip: a self-contained package per function; entry: only the entry file "
    "(the workers' Python has pulsar-shared-state installed).",
)
@click.option(
    "--function-admin-url",
    envvar="PULSAR_STATE_FUNCTION_ADMIN_URL",
    help="The admin URL the functions use to protect their topics, where a config "
    "leaves userConfig.adminUrl unset (default: --admin-url).",
)
@click.option(
    "--function-auth-token",
    envvar="PULSAR_STATE_FUNCTION_AUTH_TOKEN",
    help="The token the functions' admin calls use, stored as their secret adminToken "
    "(clear text), where a config's secrets leave it unset. Default: none (the token "
    "deploy itself uses is never copied).",
)
@click.option(
    "--admin-token-secret",
    help="Instead: a reference to that token in the cluster's secrets provider, as it "
    'takes one (JSON for Kubernetes: {"path": "pulsar-tokens", "key": "admin"}).',
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be created or updated (secrets redacted); change nothing.",
)
@_with_selection
@click.option(
    "--function-tls-trust-cert-path",
    envvar="PULSAR_STATE_FUNCTION_TLS_TRUST_CERT_PATH",
    help="The CA file, on the workers, that the functions' admin calls trust for an "
    "https admin URL (their userConfig.tlsTrustCertsFilePath), where a config leaves "
    "it unset (env PULSAR_STATE_FUNCTION_TLS_TRUST_CERT_PATH).",
)
@click.option(
    "--wait-s",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="How long to wait for every function to run and subscribe to its inputs (0: no wait).",
)
@_with_worker_python
def deploy(
    *,
    admin_url: str,
    admin_client: str,
    code: str,
    function_admin_url: str | None,
    function_auth_token: str | None,
    admin_token_secret: str | None,
    dry_run: bool,
    only: tuple[str, ...],
    config_files: tuple[Path, ...],
    tenant: str | None,
    namespace: str | None,
    function_tls_trust_cert_path: str | None,
    wait_s: float,
    python_version: str | None,
    platform: str | None,
    **auth_opts: Any,
) -> None:
    """Create the packaged functions on the cluster, or update those already there.

    The permissions each function's role needs are in docs/functions.md.
    """
    if only and config_files:
        raise click.UsageError("give --only (shipped functions) or --config (yours), not both")
    secret_ref: Any = None
    if admin_token_secret is not None:
        try:
            secret_ref = json.loads(admin_token_secret)
        except ValueError:
            secret_ref = admin_token_secret  # a plain name
    deploy_functions(
        admin_url=admin_url,
        auth=cluster_auth(auth_opts),
        admin_client=admin_client,
        code=code,
        only=only,
        config_files=config_files,
        tenant=tenant,
        namespace=namespace,
        function_admin_url=function_admin_url,
        function_auth_token=function_auth_token,
        admin_token_secret=secret_ref,
        dry_run=dry_run,
        function_tls_trust_cert_path=function_tls_trust_cert_path,
        wait_s=wait_s,
        python_version=python_version,
        platform=platform,
        echo=click.echo,
    )


@click.command()
@_admin_option
@auth_options
@_admin_client_option
@_with_selection
def undeploy(
    *,
    admin_url: str,
    admin_client: str,
    only: tuple[str, ...],
    config_files: tuple[Path, ...],
    tenant: str | None,
    namespace: str | None,
    **auth_opts: Any,
) -> None:
    """Delete the packaged functions (and their stored code) from the cluster:
    those deploy creates with the same --only/--config/--tenant/--namespace."""
    undeploy_functions(
        admin_url=admin_url,
        auth=cluster_auth(auth_opts),
        admin_client=admin_client,
        only=only,
        config_files=config_files,
        tenant=tenant,
        namespace=namespace,
        echo=click.echo,
    )
