"""A client process of the fault tests: random operations on integer keys.

Run as ``python register_worker.py '<json args>'`` (``token``: authenticated
with it; ``stop_file``: stops early once that file exists). Every operation is recorded
in the history file as an ``invoke`` line *before* it starts and a ``return``
line after, each written with one unbuffered ``write`` so that a ``kill -9``
leaves at most an invocation without its return (an unknown outcome).

Operations (on a :class:`~pulsar_state.PulsarMap`): ``read`` (``latest=True``),
``cas`` (``replace`` from the locally known value to that value + 1),
``incr`` (``update`` adding one; returns the new value) and, when asked for
(``ops``), ``write`` (a blind ``put`` of a value no other write uses; puts
made together share an entry). Each operation picks
one of ``keys`` at random (with ``put_keys``: puts one of those, ``cas`` and
``incr`` one of the others) and records it; linearizability is local (Herlihy and
Wing), so the checker checks each key's sub-history on its own.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

import pulsar

from pulsar_state import PulsarMap, PulsarStateError, StateConfig, metrics
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.retry import RetryPolicy

OP_TIMEOUT_S = 90.0


class History:
    def __init__(self, path: str, process: int) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._process = process
        self._seq = 0

    def invoke(self, kind: str, value: Any, key: str) -> int:
        self._seq += 1
        self._line({"type": "invoke", "op": self._seq, "kind": kind, "value": value, "key": key})
        return self._seq

    def complete(
        self, seq: int, kind: str, outcome: str, output: Any = None, error: str = ""
    ) -> None:
        record = {"type": outcome, "op": seq, "kind": kind, "output": output}
        if error:
            record["error"] = error
        self._line(record)

    def _line(self, record: dict[str, Any]) -> None:
        record["process"] = self._process
        record["time"] = time.monotonic_ns()
        os.write(self._fd, (json.dumps(record) + "\n").encode())


def run(args: dict[str, Any]) -> None:
    rng = random.Random(args["seed"])
    history = History(args["history"], args["process"])
    deadline = time.monotonic() + args["seconds"]
    keys = args.get("keys") or [args["key"]]
    token = args.get("token")
    client = pulsar.Client(
        args["service_url"],
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        **({"authentication": pulsar.AuthenticationToken(token)} if token else {}),
    )
    admin = AdminEndpoint(
        url=args["admin_url"],
        headers={"Authorization": f"Bearer {token}"} if token else None,
    )
    put_keys = args.get("put_keys") or []
    update_keys = [k for k in keys if k not in put_keys] if put_keys else keys
    stop_file = args.get("stop_file")
    config = StateConfig(
        access_mode=args.get("access_mode", "adaptive"),
        send_timeout_s=args.get("send_timeout_s", 15.0),
        retry=RetryPolicy(max_attempts=None, deadline_s=OP_TIMEOUT_S - 10),
    )
    with PulsarMap[str, int](client, args["topic"], admin=admin, config=config) as m:
        kinds = tuple(args.get("ops") or ("read", "cas", "incr"))
        written = 0
        while time.monotonic() < deadline and not (stop_file and os.path.exists(stop_file)):
            kind = rng.choice(kinds)
            key = rng.choice({"write": put_keys or keys, "read": keys}.get(kind, update_keys))
            if kind == "write":
                written += 1
                value = (args["process"] + 1) * 1_000_000 + written  # unique per write
                seq = history.invoke("write", value, key)
                try:
                    m.put(key, value).result(OP_TIMEOUT_S)
                except (PulsarStateError, TimeoutError) as exc:
                    history.complete(seq, kind, "info", error=repr(exc))
                else:
                    history.complete(seq, kind, "ok")
            elif kind == "read":
                seq = history.invoke("read", None, key)
                try:
                    value = m.get(key, latest=True).result(OP_TIMEOUT_S)
                except (PulsarStateError, TimeoutError) as exc:
                    history.complete(seq, kind, "fail", error=repr(exc))  # a read changes nothing
                else:
                    history.complete(seq, kind, "ok", value)
            elif kind == "cas":
                current = m.get(key).result(OP_TIMEOUT_S)  # a local read, not recorded
                expected = 0 if current is None else current
                seq = history.invoke("cas", [expected, expected + 1], key)
                try:
                    swapped = m.replace(key, expected, expected + 1).result(OP_TIMEOUT_S)
                except (PulsarStateError, TimeoutError) as exc:
                    history.complete(seq, kind, "info", error=repr(exc))
                else:
                    history.complete(seq, kind, "ok", swapped)
            else:
                seq = history.invoke("incr", None, key)
                try:
                    new = m.update(key, lambda v: (v or 0) + 1).result(OP_TIMEOUT_S)
                except (PulsarStateError, TimeoutError) as exc:
                    history.complete(seq, kind, "info", error=repr(exc))
                else:
                    history.complete(seq, kind, "ok", new)
            time.sleep(rng.random() * args.get("pause_s", 0.01))
        in_doubt = metrics.WRITES_IN_DOUBT.labels(m.topic)._value.get()
    print(f"writes in doubt: {int(in_doubt)}", flush=True)  # the worker's log tells the test
    client.close()


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
