"""Run register workers against a real broker, inject faults, collect the history."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar
from linearizability import INFINITY, Op

log = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("register_worker.py")

#: how worker processes start: ``exec`` (a new interpreter running
#: register_worker.py) or a multiprocessing start method
START_METHODS = ("exec", "fork", "forkserver", "spawn")


def _run_worker(args: dict[str, Any], log_path: str) -> None:
    """A multiprocessing worker: output to its log file, then register_worker.run."""
    import register_worker  # noqa: PLC0415  (found on the child's sys.path)

    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    register_worker.run(args)


class _StartedProcess:
    """A multiprocessing.Process with the part of Popen's interface used here."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self._process = process

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.pid is not None:
            os.kill(self._process.pid, sig)

    def kill(self) -> None:
        self._process.kill()

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(f"worker {self._process.pid}", timeout or 0.0)
        return code


@dataclass
class Fault:
    """One injected fault: what, when (seconds into the run), how long recovery took."""

    kind: str
    at_s: float
    detail: str = ""
    recovery_s: float | None = None


@dataclass
class Workload:
    """Register workers in their own processes, replaced when killed.

    Each process (a new one after each kill) is a distinct history process, so
    a killed process's last operation stays pending forever: unknown outcome.
    """

    service_url: str
    admin_url: str
    topic: str
    key: str
    workdir: Path
    #: keys the operations pick from (default: ``key`` alone)
    keys: tuple[str, ...] = ()
    workers: int = 4
    seconds: float = 20.0
    seed: int = 0
    pause_s: float = 0.01
    faults: list[Fault] = field(default_factory=list)
    #: one of START_METHODS
    start_method: str = "exec"
    #: the workers' StateConfig.access_mode
    access_mode: str = "adaptive"
    #: the operations the workers pick from (register_worker.py; default: read, cas, incr)
    ops: tuple[str, ...] = ()
    #: the workers' StateConfig.send_timeout_s (a broker paused longer leaves writes in doubt)
    send_timeout_s: float = 15.0
    #: the keys blind puts go to; with them, cas and incr take the other keys
    #: (their acknowledged increments stay countable), reads any key
    put_keys: tuple[str, ...] = ()
    #: a token the workers authenticate with (client and admin API)
    token: str | None = None
    #: admin URLs the workers take in turn (worker p: ``admin_urls[p % n]``;
    #: default: ``admin_url``)
    admin_urls: tuple[str, ...] = ()
    _procs: dict[int, subprocess.Popen[bytes] | _StartedProcess] = field(default_factory=dict)
    _next_process: int = 0
    _started: float = 0.0

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._started = time.monotonic()
        for _ in range(self.workers):
            self._spawn()

    def _spawn(self) -> int:
        process = self._next_process
        self._next_process += 1
        remaining = max(1.0, self.seconds - (time.monotonic() - self._started))
        admin_urls = self.admin_urls or (self.admin_url,)
        args = {
            "service_url": self.service_url,
            "admin_url": admin_urls[process % len(admin_urls)],
            "topic": self.topic,
            "key": self.key,
            "keys": list(self.keys or (self.key,)),
            "history": str(self.workdir / f"history-{process}.jsonl"),
            "process": process,
            "seconds": remaining,
            "seed": self.seed * 1000 + process,
            "pause_s": self.pause_s,
            "access_mode": self.access_mode,
            "ops": list(self.ops),
            "send_timeout_s": self.send_timeout_s,
            "put_keys": list(self.put_keys),
            "token": self.token,
            "stop_file": str(self.workdir / "stop"),
        }
        if self.start_method != "exec":
            ctx = multiprocessing.get_context(self.start_method)
            if self.start_method == "fork":
                # a pulsar.Client closed but not yet collected in this process
                # would hang the child that collects it: collect it here
                gc.collect()
            worker = ctx.Process(
                target=_run_worker,
                args=(args, str(self.workdir / f"worker-{process}.log")),
                daemon=True,
            )
            worker.start()
            self._procs[process] = _StartedProcess(worker)
            return process
        log_file = open(self.workdir / f"worker-{process}.log", "wb")  # noqa: SIM115
        self._procs[process] = subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(args)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log_file.close()
        return process

    def finish(self) -> None:
        """Ask every worker to stop after its current operation (before ``seconds``)."""
        (self.workdir / "stop").touch()

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def kill_random(self, rng: random.Random) -> None:
        """``kill -9`` a live worker and start a replacement."""
        live = [p for p, proc in self._procs.items() if proc.poll() is None]
        if not live:
            return
        victim = rng.choice(live)
        self._procs[victim].send_signal(signal.SIGKILL)
        self._procs[victim].wait()
        replacement = self._spawn()
        self.faults.append(
            Fault("kill -9", self.elapsed(), f"process {victim} -> replaced by {replacement}")
        )

    def run_with(self, nemesis: Callable[[Workload], None] | None = None) -> None:
        """Run until every worker finished; ``nemesis`` runs meanwhile, once."""
        self.start()
        try:
            if nemesis is not None:
                nemesis(self)
            deadline = time.monotonic() + self.seconds + 180
            for process, proc in list(self._procs.items()):
                try:
                    proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    log.error("worker %s did not finish; killing it", process)
                    proc.kill()
                    proc.wait()
        finally:
            for proc in self._procs.values():
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()

    def exit_codes(self) -> dict[int, int | None]:
        return {p: proc.returncode for p, proc in self._procs.items()}

    def worker_log(self, process: int) -> str:
        path = self.workdir / f"worker-{process}.log"
        return path.read_text(errors="replace")[-3000:] if path.is_file() else ""


@dataclass
class HistoryStats:
    ops: list[Op]
    ok: int = 0
    failed: int = 0
    unknown: int = 0
    acked_increments: int = 0
    unknown_writes: int = 0
    first_ok_after: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.ops)


def load_history(workdir: Path, key: str | None = None) -> HistoryStats:
    """Turn the workers' invoke/return lines into :class:`Op` s (of ``key`` only, if given).

    ``fail`` (a read that raised) changed nothing and is dropped; ``info`` and a
    missing return mean the outcome is unknown.
    """
    invokes: dict[tuple[int, int], dict[str, Any]] = {}
    returns: dict[tuple[int, int], dict[str, Any]] = {}
    for path in sorted(workdir.glob("history-*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            ident = (record["process"], record["op"])
            (invokes if record["type"] == "invoke" else returns)[ident] = record
    stats = HistoryStats(ops=[])
    for call_id, inv in invokes.items():
        if key is not None and inv.get("key", key) != key:
            continue
        ret = returns.get(call_id)
        kind = inv["kind"]
        value = tuple(inv["value"]) if kind == "cas" else inv["value"]
        call = inv["time"] / 1e9
        if ret is not None and ret["type"] == "fail":
            stats.failed += 1
            continue
        if ret is None or ret["type"] == "info":
            stats.unknown += 1
            if kind != "read":
                stats.unknown_writes += 1
            stats.ops.append(Op(call_id[0], kind, value, None, call, INFINITY, known=False))
            continue
        stats.ok += 1
        output = ret["output"]
        if (kind == "cas" and output) or kind == "incr":
            stats.acked_increments += 1
        stats.ops.append(Op(call_id[0], kind, value, output, call, ret["time"] / 1e9))
    return stats


def count_takeovers(client: pulsar.Client, topic: str) -> int:
    """Epoch markers on the topic: one per time a writer gained it."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    count = 0
    try:
        while reader.has_message_available():
            if reader.read_next(10_000).properties().get("pss.k") == "epoch":
                count += 1
    finally:
        reader.close()
    return count


def first_success_after(stats: HistoryStats, instant_s: float) -> float | None:
    """Seconds from ``instant_s`` until every process completed an operation again."""
    firsts: dict[int, float] = {}
    for op in stats.ops:
        if op.known and op.ret >= instant_s:
            firsts[op.process] = min(firsts.get(op.process, op.ret), op.ret)
    return max(firsts.values()) - instant_s if firsts else None
