"""A lock holder in a process of its own, that writes down every look at its lock
(the lease tests pause it or cut it off, then read what it saw and when)."""

from __future__ import annotations

import time
from pathlib import Path

import pulsar

from pulsar_state import CoordinationService, MetadataStore


def lease_holder(service_url: str, admin_url: str, topic: str, path: str, out: str) -> None:
    """Take the lock at ``path`` and write, every 10 ms until killed, one line
    ``<monotonic time> held|free`` to ``out`` (the time taken *before* ``held``
    is read), ``<time> event <name>`` for each lock event, and first ``<time>
    session <id>``."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    store = MetadataStore(
        client, topic, admin_url=admin_url, session_timeout_s=2.0, session_check_interval_s=0.25
    )
    lock = CoordinationService[str](store).acquire_lock(path, "holder").result(timeout=60)
    with open(out, "a", buffering=1, encoding="utf-8") as f:
        f.write(f"{time.monotonic()} session {store.session_id}\n")
        lock.add_listener(lambda e: f.write(f"{time.monotonic()} event {e.value}\n"))
        while True:
            at = time.monotonic()
            f.write(f"{at} {'held' if lock.held else 'free'}\n")
            time.sleep(0.01)


def read_log(out: Path) -> list[tuple[float, str]]:
    """What :func:`lease_holder` wrote: ``(monotonic time, what)`` per line."""
    rows = []
    for line in out.read_text(encoding="utf-8").splitlines():
        at, _, what = line.partition(" ")
        rows.append((float(at), what))
    return rows
