"""``pulsar-state deploy`` / ``undeploy``: every packaged function from its config file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from harness import PulsarEndpoint, wait_until

from pulsar_state.deploy.functions_deploy import FUNCTIONS, _config_dir
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli


def _cli(endpoint: PulsarEndpoint, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsar_state.cli", *args],
        env={**os.environ, "PULSAR_ADMIN_URL": endpoint.admin_url},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


# every step is a few pulsar-admin JVM runs per function, on a 2-core CI host:
# well past the suite's default 300 s when the machine is busy
@pytest.mark.timeout(900)
def test_deploy_creates_updates_and_undeploy_deletes_every_function(
    pulsar_endpoint: PulsarEndpoint,
) -> None:
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    fqns = []
    for config_file in FUNCTIONS:
        config = yaml.safe_load((_config_dir() / config_file).read_text())
        fqns.append((config["tenant"], config["namespace"], config["name"], config["parallelism"]))
    try:
        first = _cli(pulsar_endpoint, "deploy")
        assert first.returncode == 0, first.stderr
        for tenant, namespace, name, parallelism in fqns:
            assert f"created {tenant}/{namespace}/{name}" in first.stdout
            wait_until(
                lambda t=tenant, ns=namespace, n=name, p=parallelism: (
                    admin.function_status((t, ns, n))["numRunning"] == p
                ),
                timeout_s=180,
                interval_s=1,
                message=f"{name} running",
            )
        # deploying again updates in place (the command is idempotent)
        again = _cli(pulsar_endpoint, "deploy")
        assert again.returncode == 0, again.stderr
        assert again.stdout.count("updated ") == len(fqns)
        # undeploy, then deploy the same names again: Pulsar 4.0 keeps a deleted
        # function's code packages and refuses to create it again unless they go too
        gone = _cli(pulsar_endpoint, "undeploy")
        assert gone.returncode == 0, gone.stderr
        back = _cli(pulsar_endpoint, "deploy")
        assert back.returncode == 0, back.stderr
        assert back.stdout.count("created ") == len(fqns)
    finally:
        gone = _cli(pulsar_endpoint, "undeploy")
    assert gone.returncode == 0, gone.stderr
    listed = admin.run("functions", "list", "--tenant", "public", "--namespace", "default")
    for _, _, name, _ in fqns:
        assert f"deleted public/default/{name}" in gone.stdout
        assert name not in listed.split()
    # undeploying what is not there says so and succeeds
    twice = _cli(pulsar_endpoint, "undeploy")
    assert twice.returncode == 0, twice.stderr
    assert twice.stdout.count("was not deployed") == len(fqns)
