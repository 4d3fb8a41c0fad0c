"""``pulsar-state deploy|undeploy``: the packaged functions onto any cluster, with pulsar-admin.

Each function has a config file in ``deploy/functions/*.yaml`` (the format of
``pulsar-admin functions create --function-config-file``) and a single-file
entry point in ``functions/*_entry.py`` that imports the package: the workers'
Python must have ``pulsar-shared-state`` installed (the embedded broker's does;
``make package`` builds the wheel for others).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import click
import yaml

from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.errors import PulsarAdminError

__all__ = ["FUNCTIONS", "deploy", "undeploy"]

#: config file (deploy/functions/) -> entry module (functions/)
FUNCTIONS = {
    "metadata-manager.yaml": "metadata_manager_entry.py",
    "wordcount.yaml": "wordcount_entry.py",
    "sql-sink.yaml": "sink_entry.py",
}


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


@click.command()
@_admin_option
def deploy(admin_url: str) -> None:
    """Create (or update) the packaged functions on the cluster."""
    admin = PulsarAdminCli(admin_url=admin_url)
    for config_file, entry in FUNCTIONS.items():
        config = _load(config_file)
        fqn = (config["tenant"], config["namespace"], config["name"])
        path = _config_dir() / config_file
        try:
            admin.create_function(fqn=fqn, config_file=path, py=_entry(entry))
            click.echo(f"created {'/'.join(fqn)}")
        except PulsarAdminError as exc:
            if "already exists" not in exc.output:
                raise click.ClickException(str(exc)) from exc
            admin.run(
                "functions",
                "update",
                "--function-config-file",
                str(path),
                "--py",
                str(_entry(entry)),
            )
            click.echo(f"updated {'/'.join(fqn)}")


@click.command()
@_admin_option
def undeploy(admin_url: str) -> None:
    """Delete the packaged functions from the cluster."""
    admin = PulsarAdminCli(admin_url=admin_url)
    for config_file in FUNCTIONS:
        config = _load(config_file)
        fqn = (config["tenant"], config["namespace"], config["name"])
        try:
            admin.delete_function(fqn)
            click.echo(f"deleted {'/'.join(fqn)}")
        except PulsarAdminError as exc:
            if "not exist" not in exc.output:
                raise click.ClickException(str(exc)) from exc
            click.echo(f"{'/'.join(fqn)} was not deployed")
