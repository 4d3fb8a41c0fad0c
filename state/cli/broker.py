"""``pulsar-state broker start|stop|status|logs``: the embedded standalone
(:class:`~pulsar_state.deploy.standalone.StandaloneBroker`).

``status`` exits 1 when the standalone does not run or does not answer.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from pulsar_state.cli.exit_codes import EXIT_CODES_EPILOG
from pulsar_state.deploy.distribution import DEFAULT_PULSAR_VERSION, PulsarDistribution
from pulsar_state.deploy.standalone import StandaloneBroker

__all__ = ["broker", "default_data_dir", "user_data_dir"]


def user_data_dir(variable: str, leaf: str) -> Path:
    """``$variable``, else ``$XDG_DATA_HOME/pulsar-shared-state/<leaf>``."""
    explicit = os.environ.get(variable)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "pulsar-shared-state" / leaf


def default_data_dir() -> Path:
    """``$PULSAR_STATE_DATA_DIR``, else ``$XDG_DATA_HOME/pulsar-shared-state/standalone``."""
    return user_data_dir("PULSAR_STATE_DATA_DIR", "standalone")


_data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=default_data_dir,
    show_default="$PULSAR_STATE_DATA_DIR or ~/.local/share/pulsar-shared-state/standalone",
    help="Directory holding the broker's data, config, logs and pid file.",
)


def _broker(
    data_dir: Path, *, functions: bool = True, version: str | None = None
) -> StandaloneBroker:
    dist = PulsarDistribution(version=version or DEFAULT_PULSAR_VERSION)
    return StandaloneBroker(data_dir=data_dir, distribution=dist, functions=functions)


@click.group(epilog=EXIT_CODES_EPILOG)
def broker() -> None:
    """Run a real Apache Pulsar standalone on this machine (loopback only)."""


@broker.command()
@_data_dir_option
@click.option("--no-functions", is_flag=True, help="Do not run the functions worker.")
@click.option(
    "--pulsar-version",
    default=DEFAULT_PULSAR_VERSION,
    show_default=True,
    help="Version of org.apache.pulsar:pulsar-server-distribution to run.",
)
@click.option("--fresh", is_flag=True, help="Wipe the broker's data before starting.")
def start(data_dir: Path, no_functions: bool, pulsar_version: str, fresh: bool) -> None:
    """Obtain Pulsar if needed, start the standalone, wait until it is ready."""
    info = _broker(data_dir, functions=not no_functions, version=pulsar_version).start(fresh=fresh)
    click.echo(info.describe())


@broker.command()
@_data_dir_option
def stop(data_dir: Path) -> None:
    """Stop the standalone this tool started on DATA_DIR (by its pid)."""
    if _broker(data_dir).stop():
        click.echo(f"stopped the standalone on {data_dir}")
    else:
        click.echo(f"no standalone was running on {data_dir}")


@broker.command()
@_data_dir_option
def status(data_dir: Path) -> None:
    """Tell whether the standalone on DATA_DIR runs and answers; exit 1 if not."""
    b = _broker(data_dir)
    info = b.status()
    if info is None:
        click.echo(f"not running (data dir {data_dir})")
        raise SystemExit(1)
    ready = b.is_ready(info)
    click.echo(f"running pid={info.pid} pulsar={info.version} ready={str(ready).lower()}")
    click.echo(info.describe())
    if not ready:
        raise SystemExit(1)


@broker.command()
@_data_dir_option
def logs(data_dir: Path) -> None:
    """Print the last lines of the standalone's log."""
    click.echo(_broker(data_dir).log_tail(80))
