"""Leadership under kill -9: at most one leader acts at any time.

Four processes (each its own interpreter, client and metadata session) compete
for one leadership lock; the leader appends its acts to a shared file with its
lock's fencing token while ``lock.held``, then lets go. A nemesis ``kill -9``s
a random one now and then (a new process replaces it), so leaders die while
leading and their sessions expire. The file is the order in which acts
happened; a leader that still believed it led after a newer leader started
would show up as an act with a smaller token after a larger one, or two
processes acting under one token.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pulsar
from fault_report import FaultReport, FaultScale
from harness import PulsarEndpoint, unique_name, unique_topic

WORKER = Path(__file__).with_name("lock_worker.py")


def _violations(effects: list[dict[str, int]]) -> list[str]:
    found = []
    newest = -1
    owner: dict[int, int] = {}
    for i, act in enumerate(effects):
        token, pid = act["token"], act["pid"]
        if token < newest:
            found.append(f"act {i}: token {token} after {newest} (pid {pid})")
        if owner.setdefault(token, pid) != pid:
            found.append(f"act {i}: token {token} used by {owner[token]} and {pid}")
        newest = max(newest, token)
    return found


def test_at_most_one_leader_acts_under_kill_9(
    pulsar_endpoint: PulsarEndpoint,
    client: pulsar.Client,
    tmp_path: Path,
    fault_scale: FaultScale,
    fault_report: FaultReport,
) -> None:
    effects_file = tmp_path / "effects.jsonl"
    args = {
        "service_url": pulsar_endpoint.service_url,
        "admin_url": pulsar_endpoint.admin_url,
        "topic": unique_topic("leader"),
        "path": f"/{unique_name('leader')}",
        "effects": str(effects_file),
        "seconds": fault_scale.seconds,
    }
    rng = random.Random(7)
    started = time.monotonic()
    procs: list[subprocess.Popen[bytes]] = []
    kills = 0

    def spawn() -> None:
        worker_args = {**args, "seed": len(procs), "seconds": args["seconds"] - elapsed()}
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), json.dumps(worker_args)],
                stdout=subprocess.DEVNULL,
                stderr=(tmp_path / f"worker-{len(procs)}.log").open("wb"),
            )
        )

    def elapsed() -> float:
        return time.monotonic() - started

    try:
        for _ in range(fault_scale.workers):
            spawn()
        while elapsed() < fault_scale.seconds - 5:
            time.sleep(fault_scale.kill_every_s * rng.uniform(0.5, 1.5))
            alive = [p for p in procs if p.poll() is None]
            if alive and elapsed() < fault_scale.seconds - 5:
                rng.choice(alive).kill()
                kills += 1
                spawn()
        for p in procs:
            p.wait(timeout=fault_scale.seconds + 120)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    effects = [json.loads(line) for line in effects_file.read_text().splitlines() if line]
    violations = _violations(effects)
    tokens = {act["token"] for act in effects}
    assert kills >= 1
    assert len(tokens) >= fault_scale.workers, "too few leaderships to mean anything"
    crashed = [
        i for i, p in enumerate(procs) if p.returncode not in (0, -9)
    ]  # -9: killed by the nemesis
    assert not crashed, f"workers {crashed} failed: see {tmp_path}/worker-N.log"
    fault_report.add(
        test="leadership under kill -9 (4 processes, one lock)",
        ops=len(effects),
        ok=len(effects),
        unknown=0,
        failed=0,
        faults=f"{kills}x kill -9 (leaders included), session expiry",
        takeovers=f"{len(tokens)} leaderships",
        violations=len(violations),
        lost=0,
        note=(
            "leadership: acts of each leader appended with its fencing token; "
            f"{len(tokens)} leaderships, {len(effects)} acts, never a smaller token after "
            "a larger one nor two processes under one token"
            if not violations
            else f"leadership violations: {violations[:3]}"
        ),
    )
    assert not violations, violations[:10]


def test_the_checker_catches_overlapping_leaders() -> None:
    ok = [{"token": 1, "pid": 10}, {"token": 1, "pid": 10}, {"token": 5, "pid": 11}]
    assert _violations(ok) == []
    stale_act = [*ok, {"token": 1, "pid": 10}]  # the old leader acted after the new one
    assert len(_violations(stale_act)) == 1
    shared_token = [{"token": 3, "pid": 10}, {"token": 3, "pid": 11}]
    assert len(_violations(shared_token)) == 1
