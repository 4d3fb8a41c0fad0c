"""``pulsar-state deploy|undeploy``: the packaged functions onto any cluster, with pulsar-admin.

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
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import click
import yaml

from pulsar_state.deploy.errors import PulsarAdminError
from pulsar_state.deploy.function_package import build_function_package
from pulsar_state.deploy.function_ready import DeployedFunction
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.errors import ConfigurationError, PulsarStateError

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


def render_config(config: dict[str, Any], *, admin_url: str) -> tuple[dict[str, Any], list[str]]:
    """The config ``deploy`` sends: the shipped one with what the cluster decides filled in.

    Returns the config and the keys that were filled. A value the config sets
    is kept; ``userConfig.adminUrl`` is the admin URL the functions reach the
    cluster by (without it the SQL sink refuses every record and the others
    leave their state topics unprotected).
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
    return {**config, "userConfig": user}, filled


_admin_option = click.option(
    "--admin-url",
    envvar="PULSAR_ADMIN_URL",
    required=True,
    help="The cluster's admin URL (env PULSAR_ADMIN_URL).",
)


def _exists(admin: PulsarAdminCli, fqn: tuple[str, str, str]) -> bool:
    try:
        admin.function_status(fqn)
    except PulsarAdminError as exc:
        if _MISSING.search(exc.output):
            return False
        raise
    return True


def _delete_packages(admin: PulsarAdminCli, fqn: tuple[str, str, str]) -> None:
    """Delete the code packages the worker stored for ``fqn``.

    Pulsar 4.0's worker keeps ``function://tenant/ns/name@<version>`` after
    ``functions delete``, and a later ``functions create`` of the same name
    then fails ("Package ... metadata already exists"): an undeploy that leaves
    them behind could never be followed by a deploy.
    """
    url = "function://" + "/".join(fqn)
    try:
        versions = admin.run("packages", "list-versions", url).split()
    except PulsarAdminError as exc:  # none stored, or no package management
        log.debug("no packages for %s: %s", url, exc.output.strip()[-200:])
        return
    for version in versions:
        try:
            admin.run("packages", "delete", f"{url}@{version}")
        except PulsarAdminError as exc:
            log.warning("could not delete %s@%s: %s", url, version, exc.output.strip()[-200:])


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
    code: str,
    function_admin_url: str | None,
    wait_s: float,
    python_version: str | None,
    platform: str | None,
) -> None:
    """Create the packaged functions on the cluster, or update those already there."""
    admin = PulsarAdminCli(admin_url=admin_url)
    deployed: list[tuple[tuple[str, str, str], dict[str, Any]]] = []
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
                    _load(config_file), admin_url=function_admin_url or admin_url
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
                if _exists(admin, fqn):
                    admin.run(
                        "functions", "update", "--function-config-file", str(path), "--py", str(py)
                    )
                    click.echo(f"updated {'/'.join(fqn)}")
                    continue
                _delete_packages(admin, fqn)  # left by an earlier delete of the same name
                admin.create_function(fqn=fqn, config_file=path, py=py)
                click.echo(f"created {'/'.join(fqn)}")
            except PulsarAdminError as exc:
                raise click.ClickException(str(exc)) from exc
    if wait_s > 0:
        _wait_ready(admin_url, deployed, wait_s)


def _wait_ready(
    admin_url: str, deployed: list[tuple[tuple[str, str, str], dict[str, Any]]], wait_s: float
) -> None:
    """Every function running and subscribed to its inputs, or a clear error."""
    for fqn, config in deployed:
        inputs = list(config.get("inputs") or [])
        with DeployedFunction(
            admin_url=admin_url, fqn=fqn, subscription=config.get("subName")
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
def undeploy(admin_url: str) -> None:
    """Delete the packaged functions (and their stored code) from the cluster."""
    admin = PulsarAdminCli(admin_url=admin_url)
    for config_file in FUNCTIONS:
        config = _load(config_file)
        fqn = (config["tenant"], config["namespace"], config["name"])
        try:
            admin.delete_function(fqn)
            click.echo(f"deleted {'/'.join(fqn)}")
        except PulsarAdminError as exc:
            if not _MISSING.search(exc.output):
                raise click.ClickException(str(exc)) from exc
            click.echo(f"{'/'.join(fqn)} was not deployed")
        _delete_packages(admin, fqn)
