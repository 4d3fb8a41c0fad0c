"""A writer process that the cut-off test isolates from the broker.

Run as ``python zombie_writer.py '<json args>'``. It opens the map, writes once
to hold the topic, prints ``{"ready": ...}``, then reads ``put <key> <value>``
lines on stdin and prints each write's outcome as a JSON line when it is known.
It never retries a write (``max_attempts=1``): a fenced write must fail, not be
re-run, so the test can tell a late write from a legitimate retry.
"""

from __future__ import annotations

import json
import sys
import threading
from concurrent.futures import Future
from typing import Any

import pulsar

from pulsar_state import PulsarMap, StateConfig
from pulsar_state.retry import RetryPolicy

_print_lock = threading.Lock()


def emit(record: dict[str, Any]) -> None:
    with _print_lock:
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


def main(args: dict[str, Any]) -> None:
    client = pulsar.Client(
        args["service_url"],
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    mode = args.get("access_mode", "fencing")
    # it holds the topic and does not let go: in the queueing modes that takes a
    # holder that never idles out (a frozen or cut-off one looks the same)
    holds = {"idle_release_s": 3600.0, "max_tenure_s": None} if mode != "fencing" else {}
    config = StateConfig(
        access_mode=mode,
        ensure_retention=False,
        retry=RetryPolicy(max_attempts=1),
        **holds,  # type: ignore[arg-type]
    )
    with PulsarMap[str, str](client, args["topic"], config=config) as m:
        m.put(args["key"], "zombie-holds").result(60)
        emit({"ready": True})
        for line in sys.stdin:
            parts = line.split()
            if len(parts) != 3 or parts[0] != "put":
                continue
            _, key, value = parts

            def done(fut: Future[Any], value: str = value) -> None:
                exc = fut.exception()
                emit({"value": value, "ok": exc is None, "error": repr(exc) if exc else ""})

            m.put(key, value).add_done_callback(done)
    client.close()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
