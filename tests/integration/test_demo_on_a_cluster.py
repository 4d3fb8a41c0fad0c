"""``pulsar-state demo --service-url --admin-url``: every step of the demo on an existing cluster.

Nothing is started or stopped; the smoke function and the packaged functions
are deployed through the admin REST API (no Java in the deploy path), driven,
and deleted with their stored code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from harness import PulsarEndpoint

pytestmark = pytest.mark.functions


# four functions packaged and deployed, each step waiting on its condition, on a 2-core host
@pytest.mark.timeout(1500)
def test_the_demo_runs_every_step_on_an_existing_cluster(pulsar_endpoint: PulsarEndpoint) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSAR_AUTH", "PULSAR_TLS"))}
    urls = ["--service-url", pulsar_endpoint.service_url, "--admin-url", pulsar_endpoint.admin_url]
    done = subprocess.run(
        [sys.executable, "-m", "pulsar_state.cli", "demo", *urls],
        env=env,
        capture_output=True,
        text=True,
        timeout=1400,
        check=False,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    out = done.stdout
    suffix = re.search(
        r"smoke function public/default/smoke-([0-9a-f]+) through the admin REST", out
    )
    assert suffix is not None, out[-3000:]
    assert "hello 4!" in out
    assert "exact=True" in out
    assert "==> done" in out
    assert "standalone" not in out  # no broker started or stopped
    listed = pulsar_endpoint.admin("GET", "/admin/v3/functions/public/default").json()
    assert not [name for name in listed if name.endswith(suffix[1])], listed  # all deleted
