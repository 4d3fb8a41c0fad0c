"""One `pulsar-state worker` runs two functions whose code has one module name.

Both packages are `.zip` files holding a `wordcount.py` with a class `Fn` that
does something different; each function runs its own (the second does not get
the first's module from the process's `sys.modules`), and an update of the
first function to a new package runs the new code, not the module loaded before.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_name, wait_for_metadata_manager, wait_until

from pulsar_state.functions.function_admin import FunctionAdmin
from pulsar_state.functions.worker import FunctionWorker
from pulsar_state.functions.worker_config import WorkerConfig


def _package(path: Path, tag: str) -> str:
    """A code package whose ``wordcount.Fn`` tags each input with ``tag``."""
    code = f"class Fn:\n    def process(self, input, context):\n        return '{tag}:' + input\n"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{path.stem}/src/wordcount.py", code)
    return str(path)


def _config(name: str, py: str) -> dict[str, Any]:
    return {
        "py": py,
        "className": "wordcount.Fn",
        "inputs": [f"persistent://public/default/{name}-in"],
        "output": f"persistent://public/default/{name}-out",
        "subscriptionPosition": "Earliest",
    }


@pytest.mark.timeout(600)
def test_two_packages_of_one_module_name_in_one_worker(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    group = unique_name("pcode")
    names = {tag: f"{group}-{tag}" for tag in ("upper", "lower")}
    config = WorkerConfig(
        service_url=pulsar_endpoint.service_url,
        admin_url=pulsar_endpoint.admin_url,
        group=group,
        worker_id="w1",
        member_ttl_s=4.0,
        reconcile_interval_s=0.5,
        work_dir=str(tmp_path / "work"),
    )
    outputs = {
        tag: client.subscribe(
            f"persistent://public/default/{name}-out",
            "check",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        for tag, name in names.items()
    }
    producers = {
        tag: client.create_producer(f"persistent://public/default/{name}-in")
        for tag, name in names.items()
    }

    def answer(tag: str, line: str) -> str:
        producers[tag].send(line.encode())
        return str(outputs[tag].receive(timeout_millis=120_000).data().decode())

    with FunctionWorker(config).start() as worker:
        wait_for_metadata_manager(pulsar_endpoint, group)
        admin = FunctionAdmin(client, config.topics, timeout_s=60)
        for tag, name in names.items():
            package = _package(tmp_path / f"{tag}.zip", tag)
            admin.create(f"public/default/{name}", _config(name, package))
        wait_until(
            lambda: (
                sorted(worker.running()) == sorted(f"public/default/{n}:0" for n in names.values())
            ),
            timeout_s=120,
            interval_s=0.5,
            message="both functions run on the worker",
        )
        assert answer("upper", "a") == "upper:a"
        assert answer("lower", "b") == "lower:b"
        assert answer("upper", "c") == "upper:c"

        fqn = f"public/default/{names['upper']}"
        newer = _package(tmp_path / "upper-2.zip", "newer")
        admin.update(fqn, _config(names["upper"], newer), expected_version=0)
        wait_until(
            lambda: any(s.version == 1 and s.running for s in worker.status()),
            timeout_s=120,
            interval_s=0.5,
            message="the update runs",
        )
        assert answer("upper", "d") == "newer:d"
        assert answer("lower", "e") == "lower:e"
    for consumer in outputs.values():
        consumer.close()
    for producer in producers.values():
        producer.close()
