"""The ``pulsar-state`` command line: one group per concept, one option set, one exit-code table.

Every command lives in this package (``map``, ``meta``, ``functions``,
``serve``, ``sink``, ``worker``, ``broker``, ``cluster``, ``deploy``/``undeploy``/``package``,
``demo``); what they call stays in its concept's module. Options shared by
the commands are in :mod:`.options`; the exit codes, and the one mapping of
the project's errors to them, in :mod:`.exit_codes` (the ``main`` group runs
every command inside :func:`~.exit_codes.cli_errors`).
"""

from __future__ import annotations

import logging
from typing import Any

import click

from pulsar_state.cli.broker import broker
from pulsar_state.cli.cluster import cluster
from pulsar_state.cli.demo import demo
from pulsar_state.cli.deploy import deploy, package, undeploy
from pulsar_state.cli.exit_codes import EXIT_CODES_EPILOG, cli_errors
from pulsar_state.cli.functions import functions_group, serve
from pulsar_state.cli.map import map_group
from pulsar_state.cli.meta import meta_group
from pulsar_state.cli.sink import sink
from pulsar_state.cli.worker import worker
from pulsar_state.client_log import set_client_log_level

__all__ = ["main"]


class _MainGroup(click.Group):
    """The ``main`` group: every command runs inside :func:`cli_errors`."""

    def invoke(self, ctx: click.Context) -> Any:
        with cli_errors():
            return super().invoke(ctx)


@click.group(cls=_MainGroup, epilog=EXIT_CODES_EPILOG)
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
@click.version_option(package_name="pulsar-shared-state")
def main(verbose: int) -> None:
    """Consistent shared state on Apache Pulsar."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    set_client_log_level(verbose)


main.add_command(broker)
main.add_command(cluster)
main.add_command(demo)
main.add_command(sink)
main.add_command(deploy)
main.add_command(undeploy)
main.add_command(package)
main.add_command(map_group)
main.add_command(meta_group)
main.add_command(functions_group)
main.add_command(serve)
main.add_command(worker)
