"""``pulsar-state demo --service-url --admin-url``: every step of the demo on an existing cluster.

Nothing is started or stopped; the smoke function and the packaged functions
are deployed through the admin REST API (no Java in the deploy path), driven,
and deleted with their stored code; then three ``pulsar-state worker``
processes run the word count, one is killed, its instance moves and the counts
stay exact, and the workers are stopped.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from harness import PulsarEndpoint

pytestmark = pytest.mark.functions


def _workers_of(group: str) -> list[int]:
    """The pids of the ``worker`` processes whose command line names ``group``."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"worker" in args and group.encode() in args:
            pids.append(int(cmdline.parent.name))
    return pids


# three functions packaged and deployed, three worker processes, each step waiting on its
# condition, on a 2-core host
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
    # the last step: the word count on three `pulsar-state worker` processes, one killed
    assert f"on three `pulsar-state worker` processes (group demo-{suffix[1]})" in out
    killed = re.search(r"kill -9 (worker-\d) \(pid (\d+)\), which runs (\S+:0)", out)
    assert killed is not None, out[-3000:]
    moved = re.search(rf"{re.escape(killed[3])} moved to (worker-\d) in", out)
    assert moved is not None and moved[1] != killed[1], out[-3000:]
    step = out[out.index("`pulsar-state worker` processes") :]
    assert step.count("exact=True") == 2 and "exact=False" not in step, step
    assert step.count(" exit 0") == 2, step  # the survivors stopped cleanly on SIGTERM
    assert not _workers_of(f"demo-{suffix[1]}"), "a worker process outlived the demo"
    assert "standalone" not in out  # no broker started or stopped
    listed = pulsar_endpoint.admin("GET", "/admin/v3/functions/public/default").json()
    assert not [name for name in listed if name.endswith(suffix[1])], listed  # all deleted
