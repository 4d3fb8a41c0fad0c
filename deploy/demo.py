"""``pulsar-state demo``: the main job ``make run`` runs on the embedded broker.

Starts (or reuses) the standalone, shows it is ready, deploys the smoke Python
function with the distribution's own ``pulsar-admin``, drives messages through
it and prints what came out.
"""

from __future__ import annotations

import time
import uuid
from importlib import resources
from pathlib import Path

import click
import pulsar

from pulsar_state.deploy.cli import default_data_dir
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.deploy.standalone import StandaloneBroker
from pulsar_state.errors import PulsarStateError

__all__ = ["demo"]


def _step(text: str) -> None:
    click.secho(f"==> {text}", bold=True)


def _smoke_source() -> Path:
    return Path(str(resources.files("pulsar_state.functions") / "smoke.py"))


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=default_data_dir,
    help="Data directory of the embedded broker.",
)
@click.option("--messages", default=5, show_default=True, help="Messages to send through.")
@click.option("--keep-broker", is_flag=True, help="Leave the broker running afterwards.")
def demo(data_dir: Path, messages: int, keep_broker: bool) -> None:
    """Start the embedded broker and exercise a Python function on it."""
    broker = StandaloneBroker(data_dir=data_dir)
    try:
        _step(f"starting the Pulsar standalone on {data_dir} (first run downloads ~240 MB)")
        t0 = time.monotonic()
        info = broker.start()
        click.echo(info.describe())
        click.echo(f"ready in {time.monotonic() - t0:.1f}s (pid {info.pid}, Pulsar {info.version})")

        admin = PulsarAdminCli(admin_url=info.admin_url)
        suffix = uuid.uuid4().hex[:8]
        fqn = ("public", "default", f"smoke-{suffix}")
        source = f"persistent://public/default/smoke-in-{suffix}"
        sink = f"persistent://public/default/smoke-out-{suffix}"
        _step(f"deploying the smoke function {'/'.join(fqn)} with pulsar-admin")
        admin.create_function(
            fqn=fqn, py=_smoke_source(), classname="smoke.Exclaim", inputs=[source], output=sink
        )
        client = pulsar.Client(
            info.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
        )
        try:
            consumer = client.subscribe(
                sink, "demo", initial_position=pulsar.InitialPosition.Earliest
            )
            producer = client.create_producer(source)
            _step(f"sending {messages} messages through it")
            for i in range(messages):
                producer.send(f"hello {i}".encode())
            for _ in range(messages):
                msg = consumer.receive(timeout_millis=120_000)
                click.echo(f"  {msg.data().decode()}")
                consumer.acknowledge(msg)
        finally:
            client.close()
        status = admin.function_status(fqn)
        click.echo(
            f"function status: {status['numRunning']}/{status['numInstances']} running, "
            f"processed {sum(i['status']['numSuccessfullyProcessed'] for i in status['instances'])}"
        )
        admin.delete_function(fqn)
        _step("done")
    except PulsarStateError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if not keep_broker:
            broker.stop()
            click.echo("stopped the standalone (use --keep-broker to leave it running)")
