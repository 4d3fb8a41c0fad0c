"""Code distribution for `pulsar-state worker`: uploaded packages, fetched by digest.

On the real broker: `pulsar-state functions create --py FILE` uploads the file
into the group's package store and the record names `pss://sha256/<hex>`; the
file is deleted, and the worker (which never saw it) runs the function from the
package it fetched into its cache; `update --py` with a 20 MB `.zip` reaches the
worker the same way. A package one of whose chunks was overwritten with other
bytes under its digest is refused with a clear error and counted, never run,
until good chunks are written again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pulsar
import pytest
from harness import (
    PulsarEndpoint,
    pulsar_state_cli,
    pulsar_state_worker,
    unique_name,
    wait_for_metadata_manager,
    wait_until,
)

from pulsar_state.functions.function_admin import FunctionAdmin
from pulsar_state.functions.package_manifest import CHUNK_BYTES, chunk_key, split_chunks
from pulsar_state.functions.package_store import PackageStore
from pulsar_state.functions.worker import FunctionWorker
from pulsar_state.functions.worker_config import WorkerConfig

_CODE = "class Fn:\n    def process(self, input, context):\n        return '{tag}:' + input\n"


def _answers(client: pulsar.Client, name: str) -> tuple[Any, Any]:
    """(a producer on the function's input, a consumer of its output)."""
    output = client.subscribe(
        f"persistent://public/default/{name}-out",
        "check",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    return client.create_producer(f"persistent://public/default/{name}-in"), output


def _until_tagged(producer: Any, output: Any, tag: str) -> str:
    """Send lines until one comes back tagged ``tag`` (an update restarts the
    instance: lines sent before may still meet the old code); that answer."""
    for i in range(60):
        producer.send(f"line{i}".encode())
        try:
            answer = output.receive(timeout_millis=5_000)
        except pulsar.Timeout:
            continue
        output.acknowledge(answer)
        text = str(answer.data().decode())
        if text.startswith(f"{tag}:"):
            return text
    raise AssertionError(f"no output tagged {tag}")


@pytest.mark.timeout(600)
def test_a_worker_runs_uploaded_code_it_cannot_see(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    name = unique_name("ppkg")
    fqn = f"public/default/{name}"
    cache = tmp_path / "cache"
    source = tmp_path / "src" / "tagger.py"
    source.parent.mkdir()
    source.write_text(_CODE.format(tag="v1"))
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    producer, output = _answers(client, name)
    worker_env = {"PULSAR_STATE_PACKAGE_CACHE": str(cache)}
    with pulsar_state_worker(
        pulsar_endpoint, name, tmp_path / "worker.log", worker_env=worker_env
    ) as env:

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return pulsar_state_cli("functions", *args, "--timeout", "60", env=env)

        create = ["create", "--name", name, "--py", str(source), "--classname", "tagger.Fn"]
        create += ["--inputs", f"{fqn}-in", "--output", f"persistent://{fqn}-out"]
        done = cli(*create, "--subs-position", "Earliest")
        assert done.returncode == 0, done.stderr
        source.unlink()  # no worker can read the file now
        record = json.loads(cli("get", "--name", name, "--output", "json").stdout)
        assert record["config"]["package"] == f"pss://sha256/{digest}"
        assert record["config"]["py"] == "tagger.py"

        assert _until_tagged(producer, output, "v1").startswith("v1:")
        assert (cache / "sha256" / digest / "tagger.py").read_text() == _CODE.format(tag="v1")

        # an update to new code, a 20 MB .zip (incompressible ballast), deleted after
        package = tmp_path / "src" / "tagger.zip"
        with zipfile.ZipFile(package, "w", compression=zipfile.ZIP_STORED) as archive:
            archive.writestr("tagger/src/tagger.py", _CODE.format(tag="v2"))
            archive.writestr("tagger/src/ballast.bin", os.urandom(20 * 1024 * 1024))
        assert package.stat().st_size > 20 * 1024 * 1024
        zip_digest = hashlib.sha256(package.read_bytes()).hexdigest()
        updated = cli("update", "--name", name, "--py", str(package))
        assert "version 1" in updated.stdout, updated.stderr
        package.unlink()
        record = json.loads(cli("get", "--name", name, "--output", "json").stdout)
        assert record["config"]["package"] == f"pss://sha256/{zip_digest}"
        assert _until_tagged(producer, output, "v2").startswith("v2:")
        assert (cache / "sha256" / zip_digest / "tagger.zip").stat().st_size > 20 * 1024 * 1024
    producer.close()
    output.close()


@pytest.mark.timeout(600)
def test_a_package_with_an_altered_chunk_is_refused_and_counted(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    group = unique_name("pbad")
    fqn = f"public/default/{group}"
    config = WorkerConfig(
        service_url=pulsar_endpoint.service_url,
        admin_url=pulsar_endpoint.admin_url,
        group=group,
        worker_id="w1",
        member_ttl_s=4.0,
        reconcile_interval_s=0.5,
        work_dir=str(tmp_path / "work"),
        package_cache_dir=str(tmp_path / "cache"),
    )
    # a package of three chunks, then chunk 1 overwritten under its digest
    code = (_CODE.format(tag="good") + "#" * (2 * CHUNK_BYTES)).encode()
    store = PackageStore(client, config.topics.packages)
    manifest = store.upload(code)
    assert manifest.chunks == 3
    good_chunk = split_chunks(code)[1]
    bad = client.create_producer(config.topics.packages, batching_enabled=False)
    bad.send(b"X" * len(good_chunk), partition_key=chunk_key(manifest.digest, 1))
    producer, output = _answers(client, group)

    with FunctionWorker(config).start() as worker:
        wait_for_metadata_manager(pulsar_endpoint, group)
        admin = FunctionAdmin(client, config.topics, timeout_s=60)
        admin.create(
            fqn,
            {
                "py": "bad.py",
                "package": manifest.url,
                "className": "bad.Fn",
                "inputs": [f"persistent://{fqn}-in"],
                "output": f"persistent://{fqn}-out",
                "subscriptionPosition": "Earliest",
            },
        )
        producer.send(b"early")

        def refused() -> dict[str, Any] | None:
            placements = admin.status(fqn)
            reported = placements[0].reported if placements else None
            return reported if reported and reported.get("numSystemExceptions") else None

        status = wait_until(refused, timeout_s=120, interval_s=0.5, message="refused")
        assert "digest mismatch" in status["error"], status
        assert "refused" in status["latestSystemExceptions"][-1]["exceptionString"]
        assert status["numReceived"] == 0 and not status["running"]
        assert worker.packages is not None and worker.packages.refused >= 1
        assert not (tmp_path / "cache" / "sha256" / manifest.digest).exists()

        # the good chunk written again (as a new upload of the same bytes does): it runs
        bad.send(good_chunk, partition_key=chunk_key(manifest.digest, 1))
        answer = output.receive(timeout_millis=180_000)
        assert answer.data() == b"good:early"
    bad.close()
    producer.close()
    output.close()
