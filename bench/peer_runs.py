"""The peer benchmark's measurements, each in fresh spawned processes.

A measurement opens one peer (:class:`~bench.peer_clients.PeerSpec`) per
process, waits for a common start signal (connection set-up stays outside the
timing), runs its job and sends back figures; a process that fails fails the
run with its traceback. ``put_read`` times sync puts then linearizable reads
(each read checked against the value written), ``cas`` contended increments
(the final value checked against the acknowledged ones), and the bootstrap
probe opens a map of many keys (see :mod:`bench.bootstrap_probe`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench.bootstrap_probe import run_probe
from bench.common import percentile
from bench.peer_clients import CHILD_ENV, Peer, PeerSpec
from bench.peers_report import Series, Workload
from pulsar_state.cluster.admin import PulsarAdmin

VALUE = b"v" * 100


# -- measurements, each in a fresh spawned process -----------------------------------


def _latencies(fn: Callable[[int], None], n: int) -> tuple[float, list[float]]:
    samples = []
    start = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - t) * 1e6)
    return time.perf_counter() - start, samples


def _summary(n: int, elapsed: float, samples: list[float]) -> list[float]:
    return [n / elapsed, percentile(samples, 0.5), percentile(samples, 0.99)]


def _check_read(got: bytes | None, key: str) -> None:
    if got != VALUE:
        raise AssertionError(f"read back {got!r} under {key!r}, expected the 100-byte value")


def _job_put_read(peer: Peer, *, system: str, puts: int, reads: int) -> dict[str, Any]:
    for i in range(min(100, puts)):  # warm-up: connections, producers, JIT
        peer.put(f"w{i}", VALUE)
    elapsed, samples = _latencies(lambda i: peer.put(f"k{i % 1000}", VALUE), puts)
    out: dict[str, Any] = {"put": _summary(puts, elapsed, samples)}
    if system == "pulsar-raw":
        return out
    last = f"k{(puts - 1) % 1000}"
    _check_read(peer.read_latest(last), last)
    if reads:
        for _ in range(min(100, reads)):
            peer.read_latest("k1")
        elapsed, samples = _latencies(lambda _: _check_read(peer.read_latest("k1"), "k1"), reads)
        out["read"] = _summary(reads, elapsed, samples)
    return out


def _job_cas(peer: Peer, *, n: int) -> dict[str, Any]:
    retries, samples = 0, []
    for _ in range(n):
        t = time.perf_counter()
        retries += peer.increment("counter")
        samples.append((time.perf_counter() - t) * 1e6)
    return {"done": n, "retries": retries, "samples": samples}


def _job_value(peer: Peer, *, key: str) -> dict[str, Any]:
    return {"value": peer.read_latest(key)}


JOBS: dict[str, Callable[..., dict[str, Any]]] = {
    "put_read": _job_put_read,
    "cas": _job_cas,
    "value": _job_value,
}


def _child(
    job: str, spec: PeerSpec, params: dict[str, Any], messages: Any, go: Any
) -> None:  # pragma: no cover - runs in a spawned process
    try:
        peer = spec.open()
    except BaseException:
        messages.put(("error", traceback.format_exc()))
        return
    try:
        messages.put(("ready", os.getpid()))
        if not go.wait(timeout=600):
            raise TimeoutError("no start signal from the bench within 600 s")
        messages.put(("ok", JOBS[job](peer, **params)))
    except BaseException:
        messages.put(("error", traceback.format_exc()))
    finally:
        peer.close()


@contextmanager
def _environment(extra: dict[str, str]) -> Iterator[None]:
    """``extra`` in ``os.environ`` while children are spawned (they inherit it)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _gather(messages: Any, procs: list[Any], kind: str, timeout_s: float, what: str) -> list[Any]:
    """``len(procs)`` messages of ``kind``; raise on a child's error, death or the timeout."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < len(procs):
        try:
            tag, body = messages.get(timeout=1.0)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"{what}: a process died (exit {dead[0].exitcode})") from None
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{what}: no {kind} from every process in {timeout_s:.0f} s"
                ) from None
            continue
        if tag == "error":
            raise RuntimeError(f"{what} failed in its process:\n{body}")
        if tag == kind:
            got.append(body)
    return got


def run_in_children(
    spec: PeerSpec, job: str, params: dict[str, Any], count: int = 1, timeout_s: float = 600
) -> tuple[list[dict[str, Any]], float]:
    """Run ``job`` in ``count`` fresh processes started together; (results, wall seconds).

    Each process opens its peer before the common start signal, so connection set-up
    is outside the wall time; a process that fails fails the run with its traceback.
    """
    ctx = mp.get_context("spawn")
    messages, go = ctx.Queue(), ctx.Event()
    what = f"{spec.name} {job}"
    with _environment(CHILD_ENV.get(spec.name, {})):
        procs = [
            ctx.Process(target=_child, args=(job, spec, params, messages, go), daemon=True)
            for _ in range(count)
        ]
        for p in procs:
            p.start()
    try:
        _gather(messages, procs, "ready", 180, what)
        start = time.perf_counter()
        go.set()
        results = _gather(messages, procs, "ok", timeout_s, what)
        wall = time.perf_counter() - start
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
    return results, wall


def _record(series: Series, summary: list[float]) -> None:
    series.values.append(summary[0])
    series.p50_us.append(summary[1])
    series.p99_us.append(summary[2])


def run_put_and_read(
    spec: PeerSpec, column: str, *, puts: int, reads: int, put: Workload, read: Workload
) -> None:
    params = {"system": spec.name, "puts": puts, "reads": reads}
    (out,), _ = run_in_children(spec, "put_read", params)
    _record(put.add(spec.name, column), out["put"])
    if "read" in out:
        _record(read.add(spec.name, column), out["read"])


def run_cas(spec: PeerSpec, column: str, processes: int, per_process: int, cas: Workload) -> None:
    outcomes, wall = run_in_children(spec, "cas", {"n": per_process}, count=processes)
    done = sum(o["done"] for o in outcomes)
    retries = sum(o["retries"] for o in outcomes)
    samples = [s for o in outcomes for s in o["samples"]]
    (checked,), _ = run_in_children(spec, "value", {"key": "counter"})
    final = int(checked["value"] or b"0")
    if final != done:
        raise AssertionError(f"{spec.name}: {done} acknowledged increments, final value {final}")
    series = cas.add(spec.name, column)
    _record(series, _summary(done, wall, samples))
    series.extra.append(f"{retries} retries")


def compact(admin: PulsarAdmin, topic: str, timeout_s: float = 900.0) -> None:
    """Compact ``topic`` up to its end (twice: a run already going may predate the end)."""
    deadline = time.monotonic() + timeout_s
    for _ in range(2):
        admin.compact(topic)
        while (status := admin.compaction_status(topic)) != "SUCCESS":
            if status == "ERROR" or time.monotonic() > deadline:
                raise RuntimeError(f"compaction of {topic}: {status}")
            time.sleep(0.5)


def run_bootstrap(
    service_url: str, admin_url: str, topic: str, *, keys: int, column: str, boot: Workload
) -> None:
    """Ours and TableView, each in a fresh process (see :mod:`bench.bootstrap_probe`)."""
    for system, kind in (("pulsar-map", "ours"), ("TableView", "tableview")):
        probe = run_probe(kind, service_url, admin_url, topic)
        seconds, seen = float(probe["seconds"]), int(probe["keys"])
        if seen != keys:
            raise AssertionError(f"{system} bootstrap saw {seen} keys, expected {keys}")
        if kind == "ours" and probe["source"] != "checkpoint":
            raise AssertionError(f"our bootstrap started from {probe['source']}, not a checkpoint")
        series = boot.add(system, column)
        series.values.append(keys / seconds)
        series.extra.append(f"{seconds:.3f}")
        series.rss_mb.append(float(probe["rss_mb"]))
