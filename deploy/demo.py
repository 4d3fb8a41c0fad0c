"""``pulsar-state demo``: the main job ``make run`` runs on the embedded broker.

Starts (or reuses) the standalone, shows it is ready, deploys the smoke Python
function with the distribution's own ``pulsar-admin``, drives messages through
it, then shows the state core: two managers and eight threads incrementing one
counter without losing an increment, and an atomic multi-key write.
"""

from __future__ import annotations

import threading
import time
import uuid
from importlib import resources
from pathlib import Path

import click
import pulsar

from pulsar_state.cli_options import client_logger
from pulsar_state.deploy.cli import default_data_dir
from pulsar_state.deploy.demo_functions import functions_demo
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.deploy.standalone import StandaloneBroker
from pulsar_state.errors import PulsarStateError
from pulsar_state.pulsar_map import PulsarMap

__all__ = ["demo"]


def _step(text: str) -> None:
    click.secho(f"==> {text}", bold=True)


def _shared_state_demo(service_url: str, admin_url: str, suffix: str) -> None:
    """Two managers, several threads, one counter: nothing lost, one log."""
    topic = f"persistent://public/default/demo-state-{suffix}"
    _step(f"shared state: two PulsarMaps on {topic}, 4 threads each incrementing")
    # fencing is expected here: keep the native log quiet (errors only)
    clients = [pulsar.Client(service_url, logger=client_logger()) for _ in range(2)]
    maps = [PulsarMap[str, int](c, topic, admin_url=admin_url) for c in clients]
    try:
        per_thread = 25
        t0 = time.monotonic()

        def work(m: PulsarMap[str, int]) -> None:
            for _ in range(per_thread):
                m.update("counter", lambda v: (v or 0) + 1).result(timeout=120)

        threads = [threading.Thread(target=work, args=(m,)) for m in maps for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - t0
        values = [m.get("counter", latest=True).result(timeout=60) for m in maps]
        click.echo(
            f"  counter = {values} (expected {len(threads) * per_thread} in both), "
            f"{len(threads) * per_thread / took:.0f} increments/s"
        )
        maps[0].put_all({f"node-{i}": i for i in range(5)}).result(timeout=60)
        keys = sorted(maps[1].list_keys(latest=True).result(timeout=60))
        click.echo(f"  an atomic put_all seen by the other manager: {keys}")
        click.echo(f"  writer epochs (fencing tokens): {[m.manager.epoch for m in maps]}")
    finally:
        for m in maps:
            m.close()
        for c in clients:
            c.close()


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
    """Start the embedded broker, run a Python function and the shared state on it."""
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
        client = pulsar.Client(info.service_url, logger=client_logger())
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
        _shared_state_demo(info.service_url, info.admin_url, suffix)
        functions_demo(info.service_url, info.admin_url, suffix)
        _step("done")
    except PulsarStateError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if not keep_broker:
            broker.stop()
            click.echo("stopped the standalone (use --keep-broker to leave it running)")
