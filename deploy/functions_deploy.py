"""``pulsar-state deploy|undeploy``: the packaged functions onto any cluster, with pulsar-admin.

Each function has a config file in ``deploy/functions/*.yaml`` (the format of
``pulsar-admin functions create --function-config-file``) and a single-file
entry point in ``functions/*_entry.py`` that imports the package: the workers'
Python must have ``pulsar-shared-state`` installed (the embedded broker's does;
``make package`` builds the wheel for others).
"""

from __future__ import annotations

import logging
import re
from importlib import resources
from pathlib import Path
from typing import Any

import click
import yaml

from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.errors import PulsarAdminError

__all__ = ["FUNCTIONS", "deploy", "undeploy"]

log = logging.getLogger(__name__)

#: config file (deploy/functions/) -> entry module (functions/)
FUNCTIONS = {
    "metadata-manager.yaml": "metadata_manager_entry.py",
    "wordcount.yaml": "wordcount_entry.py",
    "sql-sink.yaml": "sink_entry.py",
}


#: how pulsar-admin says a function is not there ("doesn't exist", "does not exist")
_MISSING = re.compile(r"does(n't| not) exist|not found", re.IGNORECASE)


def _config_dir() -> Path:
    return Path(str(resources.files("pulsar_state.deploy") / "functions"))


def _entry(name: str) -> Path:
    return Path(str(resources.files("pulsar_state.functions") / name))


def _load(config_file: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((_config_dir() / config_file).read_text())
    return data


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


@click.command()
@_admin_option
def deploy(admin_url: str) -> None:
    """Create the packaged functions on the cluster, or update those already there."""
    admin = PulsarAdminCli(admin_url=admin_url)
    for config_file, entry in FUNCTIONS.items():
        config = _load(config_file)
        fqn = (config["tenant"], config["namespace"], config["name"])
        path = _config_dir() / config_file
        try:
            if _exists(admin, fqn):
                admin.run(
                    "functions",
                    "update",
                    "--function-config-file",
                    str(path),
                    "--py",
                    str(_entry(entry)),
                )
                click.echo(f"updated {'/'.join(fqn)}")
                continue
            _delete_packages(admin, fqn)  # left by an earlier delete of the same name
            admin.create_function(fqn=fqn, config_file=path, py=_entry(entry))
            click.echo(f"created {'/'.join(fqn)}")
        except PulsarAdminError as exc:
            raise click.ClickException(str(exc)) from exc


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
