"""``pulsar-state cluster start|stop|status|kill-broker|start-broker|restart-broker|
kill-bookie|start-bookie|logs|token|client-cert``:
a local multi-broker cluster (:class:`~pulsar_state.deploy.cluster.LocalCluster`).

``status`` exits 1 when the cluster does not run, or a process of it is down or
a broker does not answer. Out-of-range values (``--brokers 0``, ``--auth
basic``) are usage errors (exit 2).
"""

from __future__ import annotations

from pathlib import Path

import click

from pulsar_state.cli.broker import user_data_dir
from pulsar_state.cli.exit_codes import EXIT_CODES_EPILOG
from pulsar_state.deploy.cluster import LocalCluster
from pulsar_state.deploy.cluster_config import MAX_BOOKIES, MAX_BROKERS
from pulsar_state.deploy.distribution import DEFAULT_PULSAR_VERSION, PulsarDistribution

__all__ = ["cluster", "default_cluster_dir"]


def default_cluster_dir() -> Path:
    """``$PULSAR_STATE_CLUSTER_DIR``, else ``$XDG_DATA_HOME/pulsar-shared-state/cluster``."""
    return user_data_dir("PULSAR_STATE_CLUSTER_DIR", "cluster")


_data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=default_cluster_dir,
    show_default="$PULSAR_STATE_CLUSTER_DIR or ~/.local/share/pulsar-shared-state/cluster",
    help="Directory holding the cluster's data, config, logs, tokens and pids.",
)

_index_argument = click.argument("index", type=click.IntRange(min=0, max=MAX_BROKERS - 1))
_bookie_argument = click.argument("index", type=click.IntRange(min=0, max=MAX_BOOKIES - 1))


@click.group(epilog=EXIT_CODES_EPILOG)
def cluster() -> None:
    """Run a real multi-broker Apache Pulsar cluster on this machine (loopback only)."""


@cluster.command()
@_data_dir_option
@click.option(
    "--brokers",
    type=click.IntRange(1, MAX_BROKERS),
    default=2,
    show_default=True,
    help="Brokers to run (started one after the other).",
)
@click.option(
    "--bookies",
    type=click.IntRange(1, MAX_BOOKIES),
    default=1,
    show_default=True,
    help="Bookies to run; every ledger is written to all of them.",
)
@click.option(
    "--auth",
    type=click.Choice(["none", "token"]),
    default="none",
    show_default=True,
    help="token: JWT authentication and authorization, super-user 'admin'.",
)
@click.option(
    "--functions/--no-functions",
    default=False,
    show_default=True,
    help="Run a functions worker inside each broker.",
)
@click.option(
    "--tls",
    is_flag=True,
    help=(
        "Each broker also serves TLS (pulsar+ssl://, https://) with a certificate of a "
        "throwaway CA kept in DATA_DIR/tls; with --auth token a TLS client certificate "
        "(see client-cert) authenticates too."
    ),
)
@click.option(
    "--pulsar-version",
    default=DEFAULT_PULSAR_VERSION,
    show_default=True,
    help="Version of org.apache.pulsar:pulsar-server-distribution to run.",
)
@click.option("--fresh", is_flag=True, help="Wipe the cluster's data, logs and tokens first.")
def start(
    *,
    data_dir: Path,
    brokers: int,
    bookies: int,
    auth: str,
    functions: bool,
    tls: bool,
    pulsar_version: str,
    fresh: bool,
) -> None:
    """Start ZooKeeper, the bookies and the brokers; wait until the cluster is ready.

    Prints each broker's service and admin URL, one service URL naming every
    broker, with --tls the same over TLS and the CA file to trust, and with
    --auth token the file holding the super-user's token. Changing --brokers,
    --bookies, --auth or --tls of a data directory needs --fresh.
    """
    info = LocalCluster(
        data_dir=data_dir,
        distribution=PulsarDistribution(version=pulsar_version),
        brokers=brokers,
        bookies=bookies,
        auth=None if auth == "none" else auth,
        functions=functions,
        tls=tls,
    ).start(fresh=fresh)
    click.echo(info.describe())


@cluster.command()
@_data_dir_option
def stop(data_dir: Path) -> None:
    """Stop every process of the cluster on DATA_DIR (brokers, bookies, ZooKeeper)."""
    if LocalCluster(data_dir=data_dir).stop():
        click.echo(f"stopped the cluster on {data_dir}")
    else:
        click.echo(f"no cluster was running on {data_dir}")


@cluster.command()
@_data_dir_option
def status(data_dir: Path) -> None:
    """Tell whether the cluster on DATA_DIR runs and answers; exit 1 if not."""
    c = LocalCluster(data_dir=data_dir)
    info = c.status()
    if info is None:
        click.echo(f"not running (data dir {data_dir})")
        raise SystemExit(1)
    ready = c.is_ready()
    click.echo(
        f"running cluster={info.cluster_name} pulsar={info.version} ready={str(ready).lower()}"
    )
    for process, pid in c.processes().items():
        click.echo(f"{process} " + (f"pid={pid}" if pid is not None else "down"))
    click.echo(info.describe())
    if not ready:
        raise SystemExit(1)


@cluster.command("kill-broker")
@_data_dir_option
@_index_argument
def kill_broker(data_dir: Path, index: int) -> None:
    """SIGKILL broker INDEX (0 is the first): a crash, for fault drills."""
    LocalCluster(data_dir=data_dir).kill_broker(index)
    click.echo(f"killed broker-{index}")


@cluster.command("start-broker")
@_data_dir_option
@_index_argument
def start_broker(data_dir: Path, index: int) -> None:
    """Start broker INDEX again (after kill-broker) and wait until it is ready."""
    info = LocalCluster(data_dir=data_dir).start_broker(index)
    click.echo(f"broker-{index} ready: {info.service_urls[index]} admin {info.admin_urls[index]}")


@cluster.command("restart-broker")
@_data_dir_option
@_index_argument
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=120.0,
    show_default=True,
    help="Seconds the broker has to shut down cleanly before it is killed.",
)
def restart_broker(data_dir: Path, index: int, timeout: float) -> None:
    """Stop broker INDEX cleanly (its topics move), start it again, wait until it is ready.

    One step of a rolling restart: restart each broker in turn.
    """
    info = LocalCluster(data_dir=data_dir).restart_broker(index, timeout_s=timeout)
    click.echo(f"broker-{index} ready: {info.service_urls[index]} admin {info.admin_urls[index]}")


@cluster.command("kill-bookie")
@_data_dir_option
@_bookie_argument
def kill_bookie(data_dir: Path, index: int) -> None:
    """SIGKILL bookie INDEX (0 is the first): a crash, for fault drills."""
    LocalCluster(data_dir=data_dir).kill_bookie(index)
    click.echo(f"killed bookie-{index}")


@cluster.command("start-bookie")
@_data_dir_option
@_bookie_argument
def start_bookie(data_dir: Path, index: int) -> None:
    """Start bookie INDEX again (after kill-bookie) and wait until it accepts connections."""
    c = LocalCluster(data_dir=data_dir)
    c.start_bookie(index)
    click.echo(f"bookie-{index} ready: {c.bookie_id(index)}")


@cluster.command()
@_data_dir_option
@click.option(
    "--process",
    default=None,
    help="zookeeper, bookie-<i>, broker-<i> or initialize-cluster-metadata (default: all).",
)
@click.option("--lines", type=click.IntRange(min=1), default=40, show_default=True)
def logs(data_dir: Path, process: str | None, lines: int) -> None:
    """Print the last lines of the cluster's logs."""
    c = LocalCluster(data_dir=data_dir)
    names = [process] if process else list(c.processes()) or ["zookeeper"]
    for name in names:
        click.echo(f"==> {c.log_file(name)} <==")
        click.echo(c.log_tail(name, lines))


@cluster.command()
@_data_dir_option
@click.argument("role")
def token(data_dir: Path, role: str) -> None:
    """Write a token for ROLE (signed with the cluster's secret) and print its file.

    The role gets only the permissions the super-user grants it.
    """
    c = LocalCluster(data_dir=data_dir)
    c.token(role)
    click.echo(f"token_file={c.token_path(role)}")


@cluster.command("client-cert")
@_data_dir_option
@click.argument("role")
def client_cert(data_dir: Path, role: str) -> None:
    """Write a TLS client certificate for ROLE (its CN, signed by the cluster's CA) and
    print its files (with --tls).

    Under --auth token the brokers take it instead of a token over TLS: pass
    --auth-plugin tls --auth-params as printed, and --tls-trust-cert-path CA_FILE.
    The role gets only the permissions the super-user grants it ('admin' is the
    super-user).
    """
    c = LocalCluster(data_dir=data_dir)
    cert_file, key_file = c.client_certificate(role)
    click.echo(f"cert_file={cert_file}")
    click.echo(f"key_file={key_file}")
    click.echo(f"ca_file={c.tls_files.ca_file}")
    click.echo(f"auth_params=tlsCertFile:{cert_file},tlsKeyFile:{key_file}")
