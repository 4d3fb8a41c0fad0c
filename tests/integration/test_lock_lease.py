"""A lock holder paused past its session timeout does not act on the lock when
it resumes, until it has made sure of its session again (issue #25, defect 9).

A process paused (a long GC, SIGSTOP, a suspended VM) or cut off without its
socket closing looks connected from its own side; others may expire its session
meanwhile. The store keeps a lease renewed by answered questions on its
session's connection, and ``held`` reads it: the first look after the pause
says free, whatever the threads that watch the session have noticed yet.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import PulsarEndpoint, unique_name, unique_topic, wait_until
from lease_holder import lease_holder, read_log

#: the holder's session timeout is 2 s; the pause is well past it
PAUSE_S = 4.0


@pytest.mark.parametrize("pauses", [1, 3])
def test_a_holder_paused_past_its_session_timeout_does_not_hold_on_resuming(
    pulsar_endpoint: PulsarEndpoint, tmp_path: Path, pauses: int
) -> None:
    out = tmp_path / "holder.log"
    ctx = multiprocessing.get_context("spawn")
    holder = ctx.Process(
        target=lease_holder,
        args=(
            pulsar_endpoint.service_url,
            pulsar_endpoint.admin_url,
            unique_topic("lease"),
            f"/{unique_name('lock')}",
            str(out),
        ),
        daemon=True,
    )
    holder.start()
    try:
        wait_until(
            lambda: out.exists() and any(w == "held" for _, w in read_log(out)),
            timeout_s=120,
            message="the holder took the lock",
        )
        resumed_at = []
        for _ in range(pauses):
            time.sleep(1.0)
            assert holder.pid is not None
            os.kill(holder.pid, signal.SIGSTOP)
            time.sleep(PAUSE_S)
            resumed_at.append(time.monotonic())
            os.kill(holder.pid, signal.SIGCONT)
            # it looks again, and (nobody took the lock) makes sure of it again
            wait_until(
                lambda at=resumed_at[-1]: any(
                    t > at and w == "event reasserted" for t, w in read_log(out)
                ),
                timeout_s=60,
                message="the holder re-asserted its lock",
            )
    finally:
        holder.kill()
        holder.join(10)
    rows = read_log(out)
    for at in resumed_at:
        after = [(t, w) for t, w in rows if t > at]
        looks = [w for _, w in after if w in ("held", "free")]
        assert looks, "the holder never looked after resuming"
        # the first look after the pause: not held (its lease ran out while paused)
        around = [(round(t - at, 3), w) for t, w in rows if at - 5.5 < t < at + 1.0]
        assert looks[0] == "free", f"first look after the pause: {looks[:5]}; around: {around}"
        # it reported the loss, and never held before it did: the lock's
        # SESSION_LOST is told (on the store's dispatcher) before the session's
        # return is, so before any revalidation can make it held again (a look
        # between the revalidation and its REASSERTED event may say held: the
        # lock is sure again then)
        until_lost = []
        for _, w in after:
            if w == "event session_lost":
                break
            until_lost.append(w)
        assert len(until_lost) < len(after), f"no loss reported: {[w for _, w in after][:20]}"
        assert "held" not in until_lost, until_lost[:20]
        assert "event reasserted" not in until_lost, until_lost[:20]


def test_a_process_that_exits_while_it_campaigns_is_not_held_up(
    pulsar_endpoint: PulsarEndpoint,
) -> None:
    """A program that ends without closing a coordination service whose
    candidate still waits for leadership exits. The campaign ran on a pool
    thread that the interpreter joins at exit: it waited forever (a clean-clone
    run's pytest hung after its summary, behind a failed test's campaign)."""
    code = f"""
import pulsar
from pulsar_state import CoordinationService, MetadataStore
client = pulsar.Client({pulsar_endpoint.service_url!r})
args = dict(admin_url={pulsar_endpoint.admin_url!r}, session_timeout_s=2.0)
holder = MetadataStore(client, {unique_topic("exit")!r}, **args)
waiter = MetadataStore(client, holder.manager.topic, **args)
CoordinationService[str](holder).become_leader("/leader", "a").result(60)
pending = CoordinationService[str](waiter).become_leader("/leader", "b")
assert not pending.done()
print("campaigning", flush=True)
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert "campaigning" in done.stdout, done.stderr[-2000:]
