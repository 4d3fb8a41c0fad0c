"""``pulsar-state demo``: the main job ``make run`` runs on the embedded broker.

Starts (or reuses) the standalone, shows it is ready, deploys the smoke Python
function through the admin REST API, drives messages through it, then shows
the state core: two managers and eight threads incrementing one counter
without losing an increment, and an atomic multi-key write, then the packaged
functions, and last the word count on three ``pulsar-state worker`` processes,
one of which is killed (its instance moves, the counts stay exact).

``--service-url`` and ``--admin-url`` run the same steps on an existing cluster
instead (nothing is started or stopped), with the ``--auth-*`` and ``--tls-*``
options of every ``pulsar-state`` command for its broker and admin API.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from importlib import resources
from pathlib import Path

import pulsar

from pulsar_state.client_log import client_logger
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.deploy.demo_functions import functions_demo
from pulsar_state.deploy.demo_workers import workers_demo
from pulsar_state.deploy.function_ready import DeployedFunction
from pulsar_state.deploy.narration import say, step
from pulsar_state.deploy.rest_admin import PulsarAdminRest
from pulsar_state.deploy.standalone import StandaloneBroker
from pulsar_state.errors import ConfigurationError, PulsarStateError
from pulsar_state.map.pulsar_map import PulsarMap
from pulsar_state.topic_names import full_topic_name

__all__ = ["run_demo", "smoke_demo"]

log = logging.getLogger(__name__)


def _shared_state_demo(
    service_url: str, admin_url: str, suffix: str, auth: ClusterAuth | None = None
) -> None:
    """Two managers, several threads, one counter: nothing lost, one log."""
    topic = full_topic_name(f"demo-state-{suffix}")
    step(f"shared state: two PulsarMaps on {topic}, 4 threads each incrementing")
    # fencing is expected here: keep the native log quiet (errors only)
    auth = auth or ClusterAuth()
    clients = [
        pulsar.Client(service_url, logger=client_logger(), **auth.client_kwargs()) for _ in range(2)
    ]
    maps = [
        PulsarMap[str, int](
            c,
            topic,
            admin=auth.admin_endpoint(admin_url),
        )
        for c in clients
    ]
    try:
        per_thread = 25
        t0 = time.monotonic()

        failures: list[BaseException] = []

        def work(m: PulsarMap[str, int]) -> None:
            try:
                for _ in range(per_thread):
                    m.update("counter", lambda v: (v or 0) + 1).result(timeout=120)
            except BaseException as exc:  # reported below, from the main thread
                failures.append(exc)

        threads = [threading.Thread(target=work, args=(m,)) for m in maps for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=per_thread * 120)
        if any(t.is_alive() for t in threads) or failures:
            raise PulsarStateError(
                f"the shared state step failed on {topic}: "
                + (repr(failures[0]) if failures else "an incrementing thread did not finish")
            ) from (failures[0] if failures else None)
        took = time.monotonic() - t0
        values = [m.get("counter", latest=True).result(timeout=60) for m in maps]
        if values != [len(threads) * per_thread] * len(maps):
            raise PulsarStateError(
                f"the shared state step lost increments on {topic}: counter = {values}, "
                f"expected {len(threads) * per_thread}"
            )
        say(
            f"  counter = {values} (expected {len(threads) * per_thread} in both), "
            f"{len(threads) * per_thread / took:.0f} increments/s"
        )
        maps[0].put_all({f"node-{i}": i for i in range(5)}).result(timeout=60)
        keys = sorted(maps[1].list_keys(latest=True).result(timeout=60))
        say(f"  an atomic put_all seen by the other manager: {keys}")
        say(f"  writer epochs (fencing tokens): {[m.manager.epoch for m in maps]}")
    finally:
        for m in maps:
            m.close()
        for c in clients:
            c.close()


def _smoke_source() -> Path:
    return Path(str(resources.files("pulsar_state.functions") / "smoke.py"))


def smoke_demo(
    service_url: str,
    admin_url: str,
    suffix: str,
    messages: int,
    *,
    logs_dir: Path | None = None,
    timeout_s: float = 120.0,
    auth: ClusterAuth | None = None,
) -> list[str]:
    """The smoke function: deploy it, send ``messages`` through it, return its answers.

    It subscribes from the earliest position, and nothing is sent before the
    worker reports it running and its input shows its subscription: no message
    depends on how fast the instance starts.
    """
    auth = auth or ClusterAuth()
    admin = PulsarAdminRest.with_auth(admin_url, auth)
    answers: list[str] = []
    fqn = ("public", "default", f"smoke-{suffix}")
    source = full_topic_name(f"smoke-in-{suffix}")
    sink = full_topic_name(f"smoke-out-{suffix}")
    step(f"deploying the smoke function {'/'.join(fqn)} through the admin REST API")
    client = pulsar.Client(service_url, logger=client_logger(), **auth.client_kwargs())
    with DeployedFunction(
        admin=auth.admin_endpoint(admin_url),
        fqn=fqn,
        logs_dir=logs_dir,
    ) as function:
        try:
            consumer = client.subscribe(
                sink, "demo", initial_position=pulsar.InitialPosition.Earliest
            )
            config = {
                "className": "smoke.Exclaim",
                "inputs": [source],
                "output": sink,
                "subscriptionPosition": "Earliest",
            }
            admin.create_function(fqn=fqn, config=config, code=_smoke_source())
            function.wait_ready(inputs=[source], instances=1, timeout_s=timeout_s)
            say("  running, and subscribed to its input")
            producer = client.create_producer(source)
            step(f"sending {messages} messages through it")
            for i in range(messages):
                producer.send(f"hello {i}".encode())
            for i in range(messages):
                msg = function.receive(
                    consumer, what=f"answer {i + 1} of {messages} on {sink}", timeout_s=timeout_s
                )
                answers.append(msg.data().decode())
                say(f"  {answers[-1]}")
                consumer.acknowledge(msg)
            status = admin.function_status(fqn)
            processed = sum(i["status"]["numSuccessfullyProcessed"] for i in status["instances"])
            say(
                f"function status: {status['numRunning']}/{status['numInstances']} running, "
                f"processed {processed}"
            )
        finally:
            client.close()
            _delete_quietly(admin, fqn)
            admin.close()
    return answers


def _delete_quietly(admin: PulsarAdminRest, fqn: tuple[str, str, str]) -> None:
    """Delete a demo function and its stored code; one that is not there is no error."""
    try:
        admin.delete_function(fqn)
        admin.delete_packages(fqn)
    except PulsarStateError as exc:
        log.warning("could not delete %s: %s", "/".join(fqn), str(exc)[-300:])


def run_demo(
    *,
    data_dir: Path,
    messages: int = 5,
    keep_broker: bool = False,
    service_url: str | None = None,
    admin_url: str | None = None,
    auth: ClusterAuth | None = None,
) -> None:
    """The demo: on the embedded standalone (started on ``data_dir``, stopped afterwards
    unless ``keep_broker``), or on the cluster at ``service_url`` and ``admin_url``
    (both or neither: ConfigurationError).

    Raises PulsarStateError naming the step that failed (and, on the embedded
    broker, where its log is), or pulsar.PulsarException.
    """
    auth = auth or ClusterAuth()
    if (service_url is None) != (admin_url is None):
        raise ConfigurationError("give both --service-url and --admin-url, or neither")
    suffix = uuid.uuid4().hex[:8]
    if service_url is not None and admin_url is not None:
        try:
            _steps(service_url, admin_url, suffix, messages=messages, logs_dir=None, auth=auth)
        except pulsar.PulsarException as exc:
            raise PulsarStateError(f"the Pulsar client failed: {exc!r}") from exc
        return
    broker = StandaloneBroker(data_dir=data_dir)
    try:
        step(f"starting the Pulsar standalone on {data_dir} (first run downloads ~240 MB)")
        t0 = time.monotonic()
        info = broker.start()
        say(info.describe())
        say(f"ready in {time.monotonic() - t0:.1f}s (pid {info.pid}, Pulsar {info.version})")
        logs_dir = data_dir / "logs"
        _steps(
            info.service_url,
            info.admin_url,
            suffix,
            messages=messages,
            logs_dir=logs_dir,
            auth=auth,
        )
    except PulsarStateError as exc:  # says which step and, for a function, where its log is
        raise PulsarStateError(f"{exc} [broker log: {broker.log_file}]") from exc
    except pulsar.PulsarException as exc:
        raise PulsarStateError(
            f"the Pulsar client failed: {exc!r} [broker log: {broker.log_file}]"
        ) from exc
    finally:
        if not keep_broker:
            broker.stop()
            say("stopped the standalone (use --keep-broker to leave it running)")


def _steps(
    service_url: str,
    admin_url: str,
    suffix: str,
    *,
    messages: int,
    logs_dir: Path | None,
    auth: ClusterAuth,
) -> None:
    smoke_demo(service_url, admin_url, suffix, messages, logs_dir=logs_dir, auth=auth)
    _shared_state_demo(service_url, admin_url, suffix, auth)
    functions_demo(service_url, admin_url, suffix, logs_dir=logs_dir, auth=auth)
    workers_demo(service_url, admin_url, suffix, logs_dir=logs_dir, auth=auth)
    step("done")
