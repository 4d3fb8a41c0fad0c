"""``pulsar-state demo``: the walk-through ``make run`` runs
(:func:`~pulsar_state.deploy.demo.run_demo`), on the embedded broker or, with
``--service-url`` and ``--admin-url``, on an existing cluster."""

from __future__ import annotations

from pathlib import Path

import click

from pulsar_state.cli.broker import default_data_dir
from pulsar_state.cli.options import auth_options, cluster_auth
from pulsar_state.deploy.demo import run_demo

__all__ = ["demo"]


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=default_data_dir,
    help="Data directory of the embedded broker.",
)
@click.option("--messages", default=5, show_default=True, help="Messages to send through.")
@click.option("--keep-broker", is_flag=True, help="Leave the broker running afterwards.")
@click.option(
    "--service-url",
    default=None,
    help="Run on this existing cluster's broker instead of the embedded one (with --admin-url).",
)
@click.option("--admin-url", default=None, help="The existing cluster's admin URL.")
@auth_options
def demo(
    data_dir: Path,
    messages: int,
    keep_broker: bool,
    service_url: str | None,
    admin_url: str | None,
    **auth_opts: object,
) -> None:
    """Start the embedded broker; run Python functions, the shared state and three
    `pulsar-state worker` processes (one killed, its instance moved) on it."""
    if (service_url is None) != (admin_url is None):
        raise click.UsageError("give both --service-url and --admin-url, or neither")
    run_demo(
        data_dir=data_dir,
        messages=messages,
        keep_broker=keep_broker,
        service_url=service_url,
        admin_url=admin_url,
        auth=cluster_auth(auth_opts),
    )
