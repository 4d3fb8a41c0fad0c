"""A process that competes for leadership and acts while it leads (the lock fault test).

``run(args)``: open a ``MetadataStore`` (its own client and session), then until
the deadline: become leader of ``args["path"]``, act a few times while
``lock.held`` (each act is one line appended to the shared ``effects`` file with
the lock's fencing token, this process and a sequence number), then release.
Appends with ``O_APPEND`` are atomic for lines this short, so the file's order
is the order the acts happened in. ``kill -9`` may stop it anywhere.
"""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

import pulsar

from pulsar_state import CoordinationService, MetadataStore


def run(args: dict[str, Any]) -> None:
    rng = random.Random(args["seed"])
    deadline = time.monotonic() + args["seconds"]
    client = pulsar.Client(
        args["service_url"],
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    fd = os.open(args["effects"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    seq = 0
    try:
        with MetadataStore(
            client,
            args["topic"],
            admin_url=args["admin_url"],
            session_timeout_s=2.0,
            session_check_interval_s=0.25,
        ) as store:
            service: CoordinationService[int] = CoordinationService(store)
            try:
                while time.monotonic() < deadline:
                    lock = service.become_leader(args["path"], os.getpid()).result(60)
                    until = time.monotonic() + rng.uniform(0.05, 0.4)
                    while lock.held and time.monotonic() < until:
                        seq += 1
                        line = {"token": lock.fencing_token, "pid": os.getpid(), "seq": seq}
                        os.write(fd, (json.dumps(line) + "\n").encode())
                        time.sleep(0.01)
                    lock.release().result(30)
            finally:
                service.close()
    finally:
        os.close(fd)
        client.close()


def _main() -> None:  # pragma: no cover - run as a spawned process
    import sys  # noqa: PLC0415

    run(json.loads(sys.argv[1]))


if __name__ == "__main__":
    _main()
