"""Standalone reproducer: rapid ExclusiveWithFencing takeovers with publishes in flight.

Plain ``pulsar-client`` (>= 3.3), no other code: attach it to an upstream
report of ``pulsar-4.0.8-fencing-deadlock.md``. Several processes each loop:
take the topic over with an ``ExclusiveWithFencing`` producer, publish a few
messages asynchronously (still in flight when the next process fences this
one), flush, repeat. Every few seconds the parent checks that the broker still
completes a new connection and a publish; a broker that does not within the
probe timeout is reported as wedged (exit code 2), with the takeover rate
reached.

    python fencing_storm.py --service-url pulsar://127.0.0.1:6650 \
        --processes 4 --seconds 300

Take a ``jstack <broker pid>`` when it reports a wedge: the deadlock is
between ``AbstractTopic.incrementTopicEpochIfNeeded`` (holds the topic lock,
waits for a ``Producer`` monitor) and ``Producer.closeNow`` (holds the monitor,
waits for the topic lock).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import sys
import time
import uuid


def storm(service_url: str, topic: str, seconds: float, in_flight: int, counter: object) -> None:
    import pulsar  # noqa: PLC0415 - each child process imports its own client

    client = pulsar.Client(
        service_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            try:
                producer = client.create_producer(
                    topic,
                    access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
                    batching_enabled=False,
                    send_timeout_millis=5000,
                )
            except Exception:  # fenced while creating, or the broker is busy
                continue
            with counter.get_lock():  # type: ignore[attr-defined]
                counter.value += 1  # type: ignore[attr-defined]
            try:
                for i in range(in_flight):
                    producer.send_async(f"m{i}".encode(), None)
                producer.flush()
            except Exception:  # fenced by another process: the point of the test
                pass
            with contextlib.suppress(Exception):
                producer.close()
    finally:
        client.close()


def probe(service_url: str, topic: str, timeout_s: float) -> bool:
    """Whether the broker completes a new connection and one publish in time."""
    import pulsar  # noqa: PLC0415

    client = pulsar.Client(
        service_url,
        operation_timeout_seconds=int(timeout_s),
        connection_timeout_ms=int(timeout_s * 1000),
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        producer = client.create_producer(
            topic + "-probe", send_timeout_millis=int(timeout_s * 1000)
        )
        producer.send(b"probe")
        return True
    except Exception as exc:
        print(f"probe failed: {exc!r}", file=sys.stderr)
        return False
    finally:
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument(
        "--topic", default=f"persistent://public/default/storm-{uuid.uuid4().hex[:8]}"
    )
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--in-flight", type=int, default=5, help="async publishes per tenure")
    parser.add_argument("--probe-every", type=float, default=5.0)
    parser.add_argument("--probe-timeout", type=float, default=15.0)
    args = parser.parse_args()

    ctx = mp.get_context("spawn")
    counter = ctx.Value("l", 0)
    workers = [
        ctx.Process(
            target=storm, args=(args.service_url, args.topic, args.seconds, args.in_flight, counter)
        )
        for _ in range(args.processes)
    ]
    for w in workers:
        w.start()
    started = time.monotonic()
    wedged = False
    while any(w.is_alive() for w in workers):
        time.sleep(args.probe_every)
        elapsed = time.monotonic() - started
        takeovers = counter.value
        print(f"{elapsed:6.0f}s {takeovers} takeovers ({takeovers / elapsed:.0f}/s)", flush=True)
        if not probe(args.service_url, args.topic, args.probe_timeout):
            wedged = True
            print("the broker completes no new publish: WEDGED", flush=True)
            break
    for w in workers:
        w.join(timeout=5)
        if w.is_alive():
            w.kill()
    elapsed = time.monotonic() - started
    print(f"done: {counter.value} takeovers in {elapsed:.0f}s, wedged={wedged}")
    return 2 if wedged else 0


if __name__ == "__main__":
    raise SystemExit(main())
