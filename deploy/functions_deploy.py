"""``pulsar-state deploy|undeploy``: the packaged functions onto any cluster.

Each function has a config file in ``deploy/functions/*.yaml`` (the format of
``pulsar-admin functions create --function-config-file``) and a single-file
entry point in ``functions/*_entry.py`` (the SQL sink's: ``connectors/sink_entry.py``)
that imports the package. ``deploy``
sends each function as a self-contained zip (``pulsar-state package``, see
:mod:`~pulsar_state.deploy.function_package`), so workers need nothing but
Pulsar's Python runtime; ``--code entry`` sends only the entry file, for
workers whose Python has ``pulsar-shared-state`` installed.

The shipped configs leave out what depends on the cluster: ``deploy`` fills in
``userConfig.adminUrl`` (the functions protect their state topics through it:
infinite retention, no inactive deletion) with ``--function-admin-url``, by
default the ``--admin-url`` it deploys to, unless the config sets one. Then it
waits until every function's instances run and its inputs show its
subscription, so what is sent next is seen.

``--admin-client rest`` (the default) talks to the admin REST API itself
(:mod:`~pulsar_state.deploy.rest_admin`: multipart upload as ``pulsar-admin``
does), so deploying needs no Java and no Pulsar distribution; ``cli`` runs the
distribution's ``bin/pulsar-admin``. Both take the same ``--auth-*`` and
``--tls-*`` options (:func:`~pulsar_state.cli_options.auth_options`). The
functions' own admin calls authenticate with the function secret
``adminToken`` (:mod:`~pulsar_state.function_secrets`), which ``deploy``
fills in from ``--function-auth-token`` (default: the token it deploys with)
unless the config's ``secrets`` set it.
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import click
import yaml

from pulsar_state.cli_options import auth_options, cluster_auth
from pulsar_state.cluster_auth import ClusterAuth
from pulsar_state.deploy.errors import PulsarAdminError
from pulsar_state.deploy.function_package import build_function_package
from pulsar_state.deploy.function_ready import DeployedFunction
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.deploy.rest_admin import PulsarAdminRest
from pulsar_state.errors import ConfigurationError, PulsarStateError
from pulsar_state.function_secrets import ADMIN_TOKEN_SECRET

__all__ = ["FUNCTIONS", "deploy", "package", "render_config", "undeploy"]

log = logging.getLogger(__name__)

#: config file (deploy/functions/) -> (entry file (see _entry), extras it needs)
FUNCTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "metadata-manager.yaml": ("metadata_manager_entry.py", ()),
    "wordcount.yaml": ("wordcount_entry.py", ()),
    "sql-sink.yaml": ("sink_entry.py", ("postgres",)),  # PostgreSQL by URL
    "scheduler.yaml": ("scheduler_entry.py", ()),
}


#: how pulsar-admin says a function is not there ("doesn't exist", "does not exist")
_MISSING = re.compile(r"does(n't| not) exist|not found", re.IGNORECASE)


def _config_dir() -> Path:
    return Path(str(resources.files("pulsar_state.deploy") / "functions"))


#: where the entry files are: the functions' in functions/, the SQL sink's in connectors/
_ENTRY_PACKAGES = ("pulsar_state.functions", "pulsar_state.connectors")


def _entry(name: str) -> Path:
    """The entry file ``name`` (a missing one is reported by the packaging, as before)."""
    found = [Path(str(resources.files(package) / name)) for package in _ENTRY_PACKAGES]
    return next((path for path in found if path.is_file()), found[0])


def _load(config_file: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((_config_dir() / config_file).read_text())
    return data


def render_config(
    config: dict[str, Any], *, admin_url: str, admin_token: str | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The config ``deploy`` sends: the shipped one with what the cluster decides filled in.

    Returns the config and the keys that were filled. A value the config sets
    is kept; ``userConfig.adminUrl`` is the admin URL the functions reach the
    cluster by (without it the SQL sink refuses every record and the others
    leave their state topics unprotected); ``secrets.adminToken`` (when
    ``admin_token`` is given) is the token they authenticate those calls with.
    """
    if not admin_url.startswith(("http://", "https://")):
        raise ConfigurationError(
            f"the functions' admin URL must be http(s)://..., got {admin_url!r}"
        )
    user = dict(config.get("userConfig") or {})
    filled = []
    if not user.get("adminUrl"):
        user["adminUrl"] = admin_url
        filled.append(f"userConfig.adminUrl={admin_url}")
    rendered = {**config, "userConfig": user}
    secrets = dict(config.get("secrets") or {})
    if admin_token and not secrets.get(ADMIN_TOKEN_SECRET):
        secrets[ADMIN_TOKEN_SECRET] = admin_token
        rendered["secrets"] = secrets
        filled.append(f"secrets.{ADMIN_TOKEN_SECRET} (the function auth token)")
    return rendered, filled


_admin_option = click.option(
    "--admin-url",
    envvar="PULSAR_ADMIN_URL",
    required=True,
    help="The cluster's admin URL (env PULSAR_ADMIN_URL).",
)

_admin_client_option = click.option(
    "--admin-client",
    type=click.Choice(["rest", "cli"]),
    envvar="PULSAR_STATE_ADMIN_CLIENT",
    default="rest",
    show_default=True,
    help="rest: the admin REST API, no Java needed; cli: the Pulsar distribution's "
    "bin/pulsar-admin (env PULSAR_STATE_ADMIN_CLIENT).",
)

Fqn = tuple[str, str, str]


class _Admin(Protocol):
    """What deploy and undeploy do on a cluster, by either admin client."""

    def exists(self, fqn: Fqn) -> bool: ...

    def create(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None: ...

    def update(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None: ...

    def delete(self, fqn: Fqn) -> bool: ...

    def delete_packages(self, fqn: Fqn) -> None: ...

    def close(self) -> None: ...


class _CliAdmin:
    """``bin/pulsar-admin`` (needs Java and the distribution)."""

    def __init__(self, admin_url: str, auth: ClusterAuth) -> None:
        self.cli = PulsarAdminCli(admin_url=admin_url, auth=auth)

    def exists(self, fqn: Fqn) -> bool:
        try:
            self.cli.function_status(fqn)
        except PulsarAdminError as exc:
            if _MISSING.search(exc.output):
                return False
            raise
        return True

    def create(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None:
        self.cli.create_function(fqn=fqn, config_file=config_file, py=code)

    def update(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None:
        self.cli.run(
            "functions", "update", "--function-config-file", str(config_file), "--py", str(code)
        )

    def delete(self, fqn: Fqn) -> bool:
        try:
            self.cli.delete_function(fqn)
        except PulsarAdminError as exc:
            if _MISSING.search(exc.output):
                return False
            raise
        return True

    def delete_packages(self, fqn: Fqn) -> None:
        """Delete the code packages the worker stored for ``fqn``.

        Pulsar 4.0's worker keeps ``function://tenant/ns/name@<version>`` after
        ``functions delete``, and a later ``functions create`` of the same name
        then fails ("Package ... metadata already exists"): an undeploy that
        leaves them behind could never be followed by a deploy.
        """
        url = "function://" + "/".join(fqn)
        try:
            versions = self.cli.run("packages", "list-versions", url).split()
        except PulsarAdminError as exc:  # none stored, or no package management
            log.debug("no packages for %s: %s", url, exc.output.strip()[-200:])
            return
        for version in versions:
            try:
                self.cli.run("packages", "delete", f"{url}@{version}")
            except PulsarAdminError as exc:
                log.warning("could not delete %s@%s: %s", url, version, exc.output.strip()[-200:])

    def close(self) -> None:
        pass


class _RestAdmin:
    """The admin REST API (:class:`PulsarAdminRest`): no Java, no distribution."""

    def __init__(self, admin_url: str, auth: ClusterAuth) -> None:
        self.rest = PulsarAdminRest.with_auth(admin_url, auth)

    def exists(self, fqn: Fqn) -> bool:
        return self.rest.function_exists(fqn)

    def create(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None:
        self.rest.create_function(fqn=fqn, config=config, code=code)

    def update(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None:
        self.rest.update_function(fqn=fqn, config=config, code=code)

    def delete(self, fqn: Fqn) -> bool:
        return self.rest.delete_function(fqn)

    def delete_packages(self, fqn: Fqn) -> None:
        self.rest.delete_packages(fqn)

    def close(self) -> None:
        self.rest.close()


def _admin(kind: str, admin_url: str, auth: ClusterAuth) -> _Admin:
    try:
        return _RestAdmin(admin_url, auth) if kind == "rest" else _CliAdmin(admin_url, auth)
    except PulsarStateError as exc:  # no Java or distribution for cli, a bad URL
        raise click.ClickException(str(exc)) from exc


_worker_python_options = [
    click.option("--python-version", help="The workers' Python, e.g. 3.12 (default: this one)."),
    click.option("--platform", help="The workers' platform tag, e.g. manylinux2014_x86_64."),
]


def _with_worker_python(command: Any) -> Any:
    for option in reversed(_worker_python_options):
        command = option(command)
    return command


def _packages(
    out_dir: Path, python_version: str | None, platform: str | None
) -> Iterator[tuple[str, Path]]:
    """Build each function's zip into ``out_dir``: (config file, zip)."""
    for config_file, (entry, extras) in FUNCTIONS.items():
        zip_path = build_function_package(
            name=_load(config_file)["name"],
            entry=_entry(entry),
            out_dir=out_dir,
            extras=extras,
            python_version=python_version,
            platform=platform,
        )
        yield config_file, zip_path


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
    try:
        for _, path in _packages(out_dir, python_version, platform):
            click.echo(f"{path} ({path.stat().st_size // 1024} KiB)")
    except ConfigurationError as exc:
        raise click.ClickException(str(exc)) from exc


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
    help="The token the functions' admin calls use (their secret adminToken), where a "
    "config's secrets leave it unset (default: the token deploy uses, if any).",
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
    wait_s: float,
    python_version: str | None,
    platform: str | None,
    **auth_opts: Any,
) -> None:
    """Create the packaged functions on the cluster, or update those already there."""
    auth = cluster_auth(auth_opts)
    admin = _admin(admin_client, admin_url, auth)
    deployed: list[tuple[Fqn, dict[str, Any]]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="pss-deploy-") as tmp:
            if code == "zip":
                try:
                    targets = list(_packages(Path(tmp), python_version, platform))
                except ConfigurationError as exc:
                    raise click.ClickException(str(exc)) from exc
            else:
                targets = [
                    (config_file, _entry(entry)) for config_file, (entry, _) in FUNCTIONS.items()
                ]
            for config_file, py in targets:
                try:
                    config, filled = render_config(
                        _load(config_file),
                        admin_url=function_admin_url or admin_url,
                        admin_token=function_auth_token or auth.token(),
                    )
                except ConfigurationError as exc:
                    raise click.ClickException(str(exc)) from exc
                fqn = (config["tenant"], config["namespace"], config["name"])
                path = Path(tmp) / config_file  # what is sent: the shipped file, filled in
                path.write_text(yaml.safe_dump(config, sort_keys=False))
                if filled:
                    click.echo(f"{'/'.join(fqn)}: {', '.join(filled)}")
                deployed.append((fqn, config))
                try:
                    if admin.exists(fqn):
                        admin.update(fqn, config, path, py)
                        click.echo(f"updated {'/'.join(fqn)}")
                        continue
                    admin.delete_packages(fqn)  # left by an earlier delete of the same name
                    admin.create(fqn, config, path, py)
                    click.echo(f"created {'/'.join(fqn)}")
                except PulsarStateError as exc:
                    raise click.ClickException(str(exc)) from exc
    finally:
        admin.close()
    if wait_s > 0:
        _wait_ready(admin_url, deployed, wait_s, auth)


def _wait_ready(
    admin_url: str, deployed: list[tuple[Fqn, dict[str, Any]]], wait_s: float, auth: ClusterAuth
) -> None:
    """Every function running and subscribed to its inputs, or a clear error."""
    for fqn, config in deployed:
        inputs = list(config.get("inputs") or [])
        with DeployedFunction(
            admin_url=admin_url,
            fqn=fqn,
            subscription=config.get("subName"),
            headers=auth.admin_headers(),
        ) as function:
            try:
                function.wait_ready(
                    inputs=inputs, instances=int(config.get("parallelism", 1)), timeout_s=wait_s
                )
            except PulsarStateError as exc:
                raise click.ClickException(str(exc)) from exc
        click.echo(f"ready {function.name}: running, subscribed to {', '.join(inputs)}")


@click.command()
@_admin_option
@auth_options
@_admin_client_option
def undeploy(admin_url: str, admin_client: str, **auth_opts: Any) -> None:
    """Delete the packaged functions (and their stored code) from the cluster."""
    admin = _admin(admin_client, admin_url, cluster_auth(auth_opts))
    try:
        for config_file in FUNCTIONS:
            config = _load(config_file)
            fqn = (config["tenant"], config["namespace"], config["name"])
            try:
                if admin.delete(fqn):
                    click.echo(f"deleted {'/'.join(fqn)}")
                else:
                    click.echo(f"{'/'.join(fqn)} was not deployed")
                admin.delete_packages(fqn)
            except PulsarStateError as exc:
                raise click.ClickException(str(exc)) from exc
    finally:
        admin.close()
