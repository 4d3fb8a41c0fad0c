"""``pulsar-state worker``: run a functions worker of a group until stopped.

The worker (:mod:`~pulsar_state.functions.worker`) joins its group's
membership, runs the group's metadata manager and scheduler (one active per
group, the others stand by), and runs the function instances the leader
assigns to it. SIGTERM or SIGINT stops its instances and leaves the group
(its instances move to the other workers at once); a worker that dies is
replaced after ``--member-ttl`` seconds. ``--group`` and
``--functions-namespace`` name the group's topics
(:class:`~pulsar_state.functions.worker_config.WorkerTopics`); ``pulsar-state
functions`` takes the same two options to reach it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from pulsar_state.cli.exit_codes import EXIT_CODES_EPILOG
from pulsar_state.cli.options import cluster_auth, cluster_options
from pulsar_state.functions.worker import run_worker
from pulsar_state.functions.worker_config import DEFAULT_GROUP, DEFAULT_NAMESPACE, WorkerConfig

__all__ = ["group_options", "worker"]

F = TypeVar("F", bound=Callable[..., Any])


def group_options(fn: F) -> F:
    """``--group`` and ``--functions-namespace``: which group of workers (its topics)."""
    fn = click.option(
        "--functions-namespace",
        "functions_namespace",
        default=DEFAULT_NAMESPACE,
        show_default=True,
        envvar="PULSAR_STATE_FUNCTIONS_NAMESPACE",
        help="tenant/namespace of the group's topics (env PULSAR_STATE_FUNCTIONS_NAMESPACE).",
    )(fn)
    return click.option(
        "--group",
        default=DEFAULT_GROUP,
        show_default=True,
        envvar="PULSAR_STATE_FUNCTIONS_GROUP",
        help="The group of workers; its topics are <group>-metadata, -requests, ... "
        "(env PULSAR_STATE_FUNCTIONS_GROUP).",
    )(fn)


@click.command(epilog=EXIT_CODES_EPILOG)
@click.option("--worker-id", default=None, help="This worker's name [default: <host>-<pid>].")
@click.option(
    "--member-ttl",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds without a heartbeat after which a worker is dead and its instances move.",
)
@click.option(
    "--reconcile-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Seconds between comparisons of what is assigned here with what runs.",
)
@click.option(
    "--work-dir", default=None, help="Where .zip code packages are unpacked [default: a temp dir]."
)
@click.option(
    "--package-cache",
    default=None,
    envvar="PULSAR_STATE_PACKAGE_CACHE",
    help="Where code packages fetched from the group's package store are kept, across "
    "restarts (env PULSAR_STATE_PACKAGE_CACHE) [default: ~/.cache/pulsar-state/packages].",
)
@group_options
@cluster_options
def worker(
    *,
    worker_id: str | None,
    member_ttl: float,
    reconcile_interval: float,
    work_dir: str | None,
    package_cache: str | None,
    group: str,
    functions_namespace: str,
    **cluster: Any,
) -> None:
    """Run Python functions described by the group's records until stopped (SIGTERM, Ctrl-C)."""
    extra = {"worker_id": worker_id} if worker_id else {}
    try:
        config = WorkerConfig(
            service_url=cluster["service_url"],
            admin_url=cluster["admin_url"],
            group=group,
            namespace=functions_namespace,
            member_ttl_s=member_ttl,
            reconcile_interval_s=reconcile_interval,
            work_dir=work_dir,
            package_cache_dir=package_cache,
            auth=cluster_auth(cluster),
            **extra,
        )
        config.topics  # noqa: B018 - a bad namespace or group is a usage error now
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(f"worker {config.worker_id} of group {group} ({functions_namespace}); Ctrl-C stops")
    run_worker(config)
