"""The ``pulsar-state`` command line: one group per concept."""

from __future__ import annotations

import logging

import click

from pulsar_state.cli_options import set_client_log_level
from pulsar_state.connectors.sink_runner import sink
from pulsar_state.deploy.cli import broker
from pulsar_state.deploy.demo import demo
from pulsar_state.deploy.functions_deploy import deploy, package, undeploy
from pulsar_state.functions.querystate_cli import functions_group
from pulsar_state.functions.state_server import serve
from pulsar_state.map_cli import map_group
from pulsar_state.meta_cli import meta_group

__all__ = ["main"]


@click.group()
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
@click.version_option(package_name="pulsar-shared-state")
def main(verbose: int) -> None:
    """Consistent shared state on Apache Pulsar."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    set_client_log_level(verbose)


main.add_command(broker)
main.add_command(demo)
main.add_command(sink)
main.add_command(deploy)
main.add_command(undeploy)
main.add_command(package)
main.add_command(map_group)
main.add_command(meta_group)
main.add_command(functions_group)
main.add_command(serve)


if __name__ == "__main__":
    main()
