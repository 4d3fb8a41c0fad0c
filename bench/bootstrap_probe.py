"""One bootstrap, timed inside a fresh process: ``python -m bench.bootstrap_probe``.

``ours``: open a :class:`~pulsar_state.PulsarMap` (bootstrap = its newest
columnar checkpoint plus the raw tail after it, or without one the compacted
view then the tail); ``tableview``: ``client.create_table_view`` (returns once
every existing message is read). Both count the user keys they hold and print
one JSON line: ``{"seconds": ..., "keys": ..., "source": ..., "rss_mb": ...}``
(``source``: where our bootstrap started; ``rss_mb``: the process's peak
resident memory). The time excludes the interpreter's start and the imports.

The C++ client's TableView (pulsar-client 3.13) reads its initial backlog by
recursion, a few stack frames per message: past ~20,000 messages it overflows
a default 8 MiB thread stack and the process dies with SIGSEGV. The peer bench
therefore starts this probe with ``RLIMIT_STACK`` raised (see
:func:`run_probe`); thread stacks are reserved, not committed, so this costs
only what the recursion really touches.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
import uuid
from typing import Any

import pulsar

from pulsar_state import BytesSerde, PulsarMap

PROBE_STACK_BYTES = 8 * 1024**3


def _ours(client: pulsar.Client, admin_url: str, topic: str) -> tuple[int, str]:
    with PulsarMap[str, bytes](client, topic, admin_url=admin_url, value_serde=BytesSerde()) as m:
        keys: int = m.size().result()
        return keys, m.manager.bootstrap_source


def _tableview(client: pulsar.Client, topic: str) -> tuple[int, str]:
    view = client.create_table_view(topic, subscription_name=f"tv-{uuid.uuid4().hex[:8]}")
    try:
        reserved = sum(1 for k in ("__pss__/commit", "__pss__/epoch") if view.get(k) is not None)
        return len(view) - reserved, "topic"
    finally:
        view.close()


def main() -> None:
    kind, service_url, admin_url, topic = sys.argv[1:5]
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        start = time.perf_counter()
        keys, source = (
            _ours(client, admin_url, topic) if kind == "ours" else _tableview(client, topic)
        )
        seconds = time.perf_counter() - start
    finally:
        client.close()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(
        json.dumps({"seconds": seconds, "keys": keys, "source": source, "rss_mb": rss_mb}),
        flush=True,
    )


def _raise_stack_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    soft = PROBE_STACK_BYTES if hard == resource.RLIM_INFINITY else min(hard, PROBE_STACK_BYTES)
    resource.setrlimit(resource.RLIMIT_STACK, (soft, hard))


def run_probe(kind: str, service_url: str, admin_url: str, topic: str) -> dict[str, Any]:
    """Run one probe in a child process; its JSON line (seconds, keys, source, rss_mb)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.bootstrap_probe", kind, service_url, admin_url, topic],
        capture_output=True,
        text=True,
        timeout=1800,
        preexec_fn=_raise_stack_limit,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{kind} bootstrap probe exited {done.returncode}: {done.stderr.strip()[-800:]}"
        )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":
    main()
