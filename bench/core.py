"""``make bench-core``: the state core against raw Pulsar, in one run on one broker.

1. sync ``PulsarMap.put`` vs sync ``producer.send`` (ops/s, goal ratio >= 0.8; p50
   and p99 latency of each; process CPU per op; and, for comparison, the put
   completed on the tail and the put sent by the writer thread, and what the
   client costs a call that returns a future, before any code of ours);
2. many concurrent ``put`` (group commit) vs ``send_async`` with batching (goal >= 0.7);
3. caught-up ``get(latest=True)`` vs one ``consumer.get_last_message_id()`` on
   the map's own topic, with the map open, right after ours (latency, goal
   ratio <= 1.5): the same topic and the same process for both.

Each is repeated (``--rounds``), ours and the reference alternating, and
reported as the median ratio with its min and max. Results go to
``bench/results/core.md`` (linked from the README) and ``core.json``.
"""

from __future__ import annotations

import argparse
import queue
import threading
import time
import uuid
from concurrent.futures import Future
from functools import partial

import pulsar

from bench.common import Comparison, broker, timed, write_report
from pulsar_state import PulsarMap, StateConfig
from pulsar_state.topic_names import full_topic_name


def _topic(prefix: str) -> str:
    return full_topic_name(f"bench-{prefix}-{uuid.uuid4().hex[:8]}")


def _raw_sync(producer: pulsar.Producer, n: int, latencies: list[float]) -> None:
    for i in range(n):
        start = time.perf_counter()
        producer.send(str(i).encode(), partition_key=f"k{i % 1000}")
        latencies.append(time.perf_counter() - start)


def _raw_future_sync(producer: pulsar.Producer, n: int) -> None:
    """``send_async``, its callback completing a future the caller waits on: what
    a call that returns a future (as ``put`` does) costs before any code of ours."""
    for i in range(n):
        future: Future[pulsar.MessageId] = Future()
        producer.send_async(
            str(i).encode(), lambda r, m, f=future: f.set_result(m), partition_key=f"k{i % 1000}"
        )
        future.result()


def _percentile_us(latencies: list[float], q: float) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6


def _raw_many(producer: pulsar.Producer, n: int) -> None:
    done = threading.Semaphore(0)
    for i in range(n):
        producer.send_async(
            str(i).encode(), lambda r, m: done.release(), partition_key=f"k{i % 1000}"
        )
    producer.flush()
    for _ in range(n):
        done.acquire()


def _raw_round_trip(producer: pulsar.Producer, consumer: pulsar.Consumer, n: int) -> None:
    """Send, then receive the same message back: the floor of a read-your-writes put."""
    for i in range(n):
        producer.send(str(i).encode(), partition_key=f"k{i % 1000}")
        consumer.acknowledge(consumer.receive(timeout_millis=30_000))


def _raw_many_round_trip(producer: pulsar.Producer, consumer: pulsar.Consumer, n: int) -> None:
    """``send_async`` with batching while a consumer receives all of it back: the
    floor of concurrent puts with read-your-writes."""

    def receive_all() -> None:
        msg = None
        for _ in range(n):
            msg = consumer.receive(timeout_millis=30_000)
        consumer.acknowledge_cumulative(msg)

    receiver = threading.Thread(target=receive_all)
    receiver.start()
    _raw_many(producer, n)
    receiver.join()


def _sync_puts_per_s(
    client: pulsar.Client,
    admin_url: str,
    prefix: str,
    config: StateConfig,
    args: argparse.Namespace,
) -> float:
    """Sync puts a second on a fresh map with ``config`` (after 200 warm-up puts)."""
    with PulsarMap[str, int](client, _topic(prefix), admin_url=admin_url, config=config) as m:
        for i in range(200):
            m.put(f"w{i}", i).result()

        def puts() -> None:
            for i in range(args.sync_ops):
                m.put(f"k{i % 1000}", i).result()

        return args.sync_ops / timed(puts)


def _one_way_floor(
    producer: pulsar.Producer, consumer: pulsar.Consumer, n: int
) -> tuple[float, float]:
    """The one-way write path with no code of ours: the caller hands each send to
    a writer thread through a queue and waits on a future the writer completes
    at the ack, while a tail thread receives every message back (what any design
    with a writer thread, a future and a local replay pays). Returns the wall
    and the process CPU seconds the ``n`` sends took."""
    inbox: queue.SimpleQueue[tuple[Future[pulsar.MessageId], bytes, str] | None] = (
        queue.SimpleQueue()
    )
    stop = threading.Event()

    def writer() -> None:
        while (item := inbox.get()) is not None:
            future, payload, key = item
            future.set_result(producer.send(payload, partition_key=key))

    def tail() -> None:
        while not stop.is_set():
            try:
                msg = consumer.receive(timeout_millis=100)
            except pulsar.Timeout:
                continue
            msg.message_id(), msg.properties(), msg.data()

    threads = [threading.Thread(target=writer), threading.Thread(target=tail)]
    for thread in threads:
        thread.start()
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    try:
        for i in range(n):
            future: Future[pulsar.MessageId] = Future()
            inbox.put((future, str(i).encode(), f"k{i % 1000}"))
            future.result()
        return time.perf_counter() - wall_start, time.process_time() - cpu_start
    finally:
        inbox.put(None)
        stop.set()
        for thread in threads:
            thread.join()


def _raw_latest(consumer: pulsar.Consumer, n: int) -> None:
    for _ in range(n):
        consumer.get_last_message_id()


def _raw_future_latest(consumer: pulsar.Consumer, n: int) -> None:
    """``get_last_message_id_async``, its callback completing a future the caller
    waits on: what a read that returns a future (as ``get(latest=True)`` does)
    costs before any code of ours."""
    native = consumer._consumer
    for _ in range(n):
        future: Future[pulsar.MessageId] = Future()
        native.get_last_message_id_async(lambda r, m, f=future: f.set_result(m))
        future.result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sync-ops", type=int, default=1500)
    parser.add_argument("--async-ops", type=int, default=20000)
    parser.add_argument("--reads", type=int, default=3000)
    args = parser.parse_args()

    sync = Comparison("sync put", "ops/s", ">= 0.8", True, reference_name="producer.send")
    many = Comparison(
        "concurrent puts (group commit)",
        "ops/s",
        ">= 0.7",
        True,
        reference_name="send_async + batching",
    )
    latest = Comparison(
        "read(latest) when caught up",
        "µs",
        "<= 1.5",
        False,
        reference_name="get_last_message_id",
    )
    round_trip = Comparison(
        "sync put vs its read-your-writes floor",
        "ops/s",
        "(context)",
        True,
        reference_name="producer.send + consumer.receive of it",
    )
    many_round_trip = Comparison(
        "concurrent puts vs their read-your-writes floor",
        "ops/s",
        "(context)",
        True,
        reference_name="send_async + batching, all received back",
    )
    # what read-your-writes costs before any code of ours: the bound on rows 1 and 2
    sync_bound = Comparison(
        "bound on row 1: send + receive it back vs send",
        "ops/s",
        "(context)",
        True,
        reference_name="producer.send",
    )
    many_bound = Comparison(
        "bound on row 2: send_async + receive all back vs send_async",
        "ops/s",
        "(context)",
        True,
        reference_name="send_async + batching",
    )
    future_bound = Comparison(
        "bound on row 1 for a call returning a future: send_async + future vs send",
        "ops/s",
        "(context)",
        True,
        reference_name="producer.send",
    )
    latest_bound = Comparison(
        "bound on row 3 for a read returning a future: "
        "get_last_message_id_async + future vs get_last_message_id",
        "µs",
        "(context)",
        False,
        reference_name="get_last_message_id",
    )
    one_way = Comparison(
        "sync put vs the one-way floor",
        "ops/s",
        "(context)",
        True,
        reference_name="writer thread + future + tail, no code of ours",
    )
    one_way_bound = Comparison(
        "bound on row 1 for the one-way design: writer thread + future + tail vs send",
        "ops/s",
        "(context)",
        True,
        reference_name="producer.send",
    )
    one_way_cpu = Comparison(
        "process CPU per sync put vs the one-way floor",
        "µs",
        "(context)",
        False,
        reference_name="writer thread + future + tail",
    )
    sync_p50 = Comparison(
        "sync put latency p50", "µs", "(context)", False, reference_name="producer.send p50"
    )
    sync_p99 = Comparison(
        "sync put latency p99", "µs", "(context)", False, reference_name="producer.send p99"
    )
    on_ack = Comparison(
        "sync put: completed at the ack vs on the tail",
        "ops/s",
        "(context)",
        True,
        reference_name="commit_on_ack=False",
    )
    cpu = Comparison(
        "process CPU per sync put vs per producer.send",
        "µs",
        "(context)",
        False,
        reference_name="producer.send",
    )
    recorded = [
        sync,
        sync_p50,
        sync_p99,
        cpu,
        on_ack,
        many,
        latest,
        one_way,
        one_way_cpu,
        round_trip,
        many_round_trip,
        sync_bound,
        future_bound,
        one_way_bound,
        many_bound,
        latest_bound,
    ]
    with broker() as (service_url, admin_url):
        client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            # round 0 warms the broker's JIT and caches up and is not recorded
            for round_ in range(args.rounds + 1):
                print(f"round {round_}/{args.rounds}", flush=True)
                map_topic = _topic("map")
                with PulsarMap[str, int](client, map_topic, admin_url=admin_url) as m:
                    for i in range(200):  # warm up
                        m.put(f"w{i}", i).result()

                    put_latencies: list[float] = []

                    def ours_sync(latencies: list[float] = put_latencies) -> None:
                        for i in range(args.sync_ops):
                            start = time.perf_counter()
                            m.put(f"k{i % 1000}", i).result()
                            latencies.append(time.perf_counter() - start)

                    cpu_start = time.process_time()
                    sync.ours.append(args.sync_ops / timed(ours_sync))
                    cpu.ours.append((time.process_time() - cpu_start) / args.sync_ops * 1e6)
                    round_trip.ours.append(sync.ours[-1])
                    on_ack.ours.append(sync.ours[-1])
                    sync_p50.ours.append(_percentile_us(put_latencies, 0.5))
                    sync_p99.ours.append(_percentile_us(put_latencies, 0.99))

                    def ours_many() -> None:
                        futures = [m.put(f"k{i % 1000}", i) for i in range(args.async_ops)]
                        for f in futures:
                            f.result()

                    many.ours.append(args.async_ops / timed(ours_many))
                    many_round_trip.ours.append(many.ours[-1])

                    def ours_latest() -> None:
                        for _ in range(args.reads):
                            m.get("k1", latest=True).result()

                    latest.ours.append(timed(ours_latest) / args.reads * 1e6)
                    # the reference asks about the same topic in the same state
                    probe = client.subscribe(map_topic, "probe", receiver_queue_size=0)
                    latest.reference.append(
                        timed(partial(_raw_latest, probe, args.reads)) / args.reads * 1e6
                    )
                    latest_bound.ours.append(
                        timed(partial(_raw_future_latest, probe, args.reads)) / args.reads * 1e6
                    )
                    latest_bound.reference.append(latest.reference[-1])
                    probe.unsubscribe()

                on_ack.reference.append(
                    _sync_puts_per_s(
                        client, admin_url, "map-tail", StateConfig(commit_on_ack=False), args
                    )
                )
                raw_topic = _topic("raw")
                producer = client.create_producer(raw_topic)
                for _ in range(200):
                    producer.send(b"warm")
                send_latencies: list[float] = []
                cpu_start = time.process_time()
                sync.reference.append(
                    args.sync_ops
                    / timed(partial(_raw_sync, producer, args.sync_ops, send_latencies))
                )
                cpu.reference.append((time.process_time() - cpu_start) / args.sync_ops * 1e6)
                sync_p50.reference.append(_percentile_us(send_latencies, 0.5))
                sync_p99.reference.append(_percentile_us(send_latencies, 0.99))
                future_bound.ours.append(
                    args.sync_ops / timed(partial(_raw_future_sync, producer, args.sync_ops))
                )
                future_bound.reference.append(sync.reference[-1])
                producer.close()
                batched = client.create_producer(
                    _topic("raw-async"), batching_enabled=True, block_if_queue_full=True
                )
                many.reference.append(
                    args.async_ops / timed(partial(_raw_many, batched, args.async_ops))
                )
                batched.close()
                echo_topic = _topic("echo")
                echo = client.subscribe(echo_topic, "echo")
                echo_producer = client.create_producer(echo_topic, batching_enabled=False)
                _raw_round_trip(echo_producer, echo, 200)
                round_trip.reference.append(
                    args.sync_ops
                    / timed(partial(_raw_round_trip, echo_producer, echo, args.sync_ops))
                )
                echo_producer.close()
                echo.unsubscribe()
                floor_topic = _topic("one-way")
                floor_tail = client.subscribe(floor_topic, "tail")
                floor_producer = client.create_producer(floor_topic, batching_enabled=False)
                _one_way_floor(floor_producer, floor_tail, 200)
                floor_wall, floor_cpu = _one_way_floor(floor_producer, floor_tail, args.sync_ops)
                one_way.reference.append(args.sync_ops / floor_wall)
                floor_producer.close()
                floor_tail.unsubscribe()
                one_way.ours.append(sync.ours[-1])
                one_way_bound.ours.append(one_way.reference[-1])
                one_way_bound.reference.append(sync.reference[-1])
                one_way_cpu.ours.append(cpu.ours[-1])
                one_way_cpu.reference.append(floor_cpu / args.sync_ops * 1e6)
                sync_bound.ours.append(round_trip.reference[-1])
                sync_bound.reference.append(sync.reference[-1])
                echo_many_topic = _topic("echo-many")
                echo_many = client.subscribe(echo_many_topic, "echo")
                echo_many_producer = client.create_producer(
                    echo_many_topic, batching_enabled=True, block_if_queue_full=True
                )
                many_round_trip.reference.append(
                    args.async_ops
                    / timed(
                        partial(_raw_many_round_trip, echo_many_producer, echo_many, args.async_ops)
                    )
                )
                echo_many_producer.close()
                echo_many.unsubscribe()
                many_bound.ours.append(many_round_trip.reference[-1])
                many_bound.reference.append(many.reference[-1])
                if round_ == 0:
                    for c in recorded:
                        c.ours.clear()
                        c.reference.clear()
        finally:
            client.close()
    path = write_report(
        "core",
        "State core vs raw Pulsar",
        recorded,
        """
Same broker (the embedded Pulsar 4.0.8 standalone unless `PULSAR_STATE_BENCH_SERVICE_URL` is
set), same client process, ours and the reference alternating in each round.
A `PulsarMap.put` is one message published by the exclusive writer (the
product's defaults: adaptive access mode, commit on the broker's
acknowledgement). It completes at the broker's ack when the entry directly
follows the writer's previous one, the writer applying it to its own state
(read-your-writes kept); otherwise once the writer's tailer has applied it.
`producer.send` only waits for the broker's ack. Throughput ratios are ours /
reference (higher is better); latency ratios are ours / reference (lower is
better); p50 and p99 are per put and per send within each round. "Completed at
the ack vs on the tail" compares the default with `commit_on_ack=False` in the
same round. Every put is handed to the writer's thread, which sends it and
waits for its ack (the one-way write path of docs/state.md).
"Process CPU" is the client process's CPU time (all its threads: the caller,
the Pulsar client's IO thread, our writer and tailer) per put or send: on a
2-core machine that also runs the broker, the put's extra CPU is what keeps it
from the raw send's rate. The read-your-writes rows compare the puts with a raw send
followed by receiving that message back on a consumer (what a put completed on
the tail must wait for); the "bound" rows measure that, and a call that
returns a future (`send_async` whose callback completes a `Future` the caller
waits on, as `put(...).result()` must; `get_last_message_id_async` completing
one, as `get(latest=True).result()` must), against the goals' references with
no code of ours at all. The latest-read rows' references ask about the map's
own topic, with the map open, right after our reads: the same topic and the
same process (its threads, its heap) as ours. The "one-way floor" is the design docs/state.md
prescribes with no code of ours: the caller hands each send to a writer thread
through a queue and waits on a future the writer completes at the ack, while a
tail thread receives every message back; it is what the put pays before any
state logic, and so the ceiling of row 1 for that design.
""",
    )
    print(path.read_text())


if __name__ == "__main__":
    main()
