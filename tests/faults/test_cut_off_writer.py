"""A writer cut off from the broker (its sockets stay open) is fenced for good.

The zombie holds the topic, loses its network (iptables drops its packets, as
in a partition or a long pause), submits a write, and meanwhile a new writer
takes the topic over and writes: at once in ``"fencing"`` mode, and in the
default ``"adaptive"`` mode after queueing for its client's operation timeout
behind a holder that does not let go (then ``ExclusiveWithFencing``). When the network
heals, the zombie's late write must be neither applied (by any reader, now or
after a fresh bootstrap) nor acknowledged.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from queue import Empty, Queue
from typing import Any
from urllib.parse import urlparse

import pulsar
import pytest
from fault_report import FaultReport
from harness import PulsarEndpoint, unique_topic, wait_until
from network import connections, iptables_unavailable, partitioned

from pulsar_state import PulsarMap, StateConfig

ZOMBIE = Path(__file__).with_name("zombie_writer.py")
CUT_S = 8.0  # shorter than the clients' send and keep-alive timeouts


class ZombieProcess:
    def __init__(self, service_url: str, topic: str, key: str, access_mode: str) -> None:
        args = {"service_url": service_url, "topic": topic, "key": key, "access_mode": access_mode}
        self.proc = subprocess.Popen(
            [sys.executable, str(ZOMBIE), json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines: Queue[dict[str, Any]] = Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))

    def next(self, timeout_s: float) -> dict[str, Any]:
        try:
            return self.lines.get(timeout=timeout_s)
        except Empty:
            raise AssertionError(f"the zombie said nothing for {timeout_s}s") from None

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _entries_with(client: pulsar.Client, topic: str, needle: bytes) -> int:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    found = 0
    try:
        while reader.has_message_available():
            if needle in reader.read_next(10_000).data():
                found += 1
    finally:
        reader.close()
    return found


#: the adaptive successor's client: it queues this long behind the frozen holder,
#: then fences it, well inside the cut
ADAPTIVE_WAIT_S = 3


@pytest.mark.fencing
@pytest.mark.parametrize("mode", ["fencing", "adaptive"])
def test_a_cut_off_writer_is_fenced_and_its_late_write_never_applied(
    broker_endpoint: PulsarEndpoint,
    make_client: Any,
    fault_report: FaultReport,
    mode: str,
) -> None:
    reason = iptables_unavailable()
    if reason:
        pytest.skip(reason)
    topic = unique_topic("zombie")
    admin_url = broker_endpoint.admin_url
    broker_port = urlparse(broker_endpoint.service_url).port
    assert broker_port is not None
    with PulsarMap[str, str](make_client(), topic, admin_url=admin_url) as seed:
        seed.put("k", "init").result(60)

    zombie = ZombieProcess(broker_endpoint.service_url, topic, "k", mode)
    successor_client = make_client()
    if mode == "adaptive":
        successor_client = pulsar.Client(
            broker_endpoint.service_url,
            operation_timeout_seconds=ADAPTIVE_WAIT_S,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
    try:
        assert zombie.next(90).get("ready")
        ports = wait_until(
            lambda: connections(zombie.proc.pid, broker_port), message="the zombie's connections"
        )
        cut_at = time.monotonic()
        with partitioned(ports):
            zombie.send("put k zombie-late")
            time.sleep(1)
            config = StateConfig(access_mode=mode)  # type: ignore[arg-type]
            with PulsarMap[str, str](
                successor_client, topic, admin_url=admin_url, config=config
            ) as successor:
                successor.put("k", "successor-1").result(60)
                successor.put("k", "successor-2").result(60)
                assert successor.get("k").result() == "successor-2"
            time.sleep(max(0.0, CUT_S - (time.monotonic() - cut_at)))
        healed_at = time.monotonic()
        outcome = zombie.next(120)
        decided_s = time.monotonic() - healed_at
    finally:
        zombie.stop()
        if mode == "adaptive":
            successor_client.close()

    assert outcome["value"] == "zombie-late"
    assert not outcome["ok"], "a write made after the writer was fenced was acknowledged"
    with PulsarMap[str, str](make_client(), topic, admin_url=admin_url) as fresh:
        assert fresh.get("k", latest=True).result(60) == "successor-2"
    landed = _entries_with(make_client(), topic, b"zombie-late")
    fault_report.add(
        test=f"writer cut off (iptables), {mode} mode",
        ops=4,
        ok=3,
        unknown=0,
        failed=1,
        faults=f"1x partition of {CUT_S:.0f}s + takeover",
        takeovers=2,
        violations=0,
        lost=0,
        recovery=f"zombie's write refused {decided_s:.1f}s after healing",
        note=(
            "cut-off writer: its late write "
            + (
                f"reached the log {landed} time(s), skipped as stale by every reader"
                if landed
                else "never reached the log (the broker had closed its fenced producer)"
            )
            + f"; the zombie's call failed with {outcome['error'][:80]}"
        ),
    )
