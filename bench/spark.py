"""``make bench-spark``: rows/s reading a snapshot of N keys with the pulsar_state source.

Reference in the same run and Spark session (local[2]): ``spark.range(N)`` with
the same two string columns. Both are materialized with the ``noop`` sink, so
the figure is the source's cost. Results: ``bench/results/spark.md``.

``--mode changelog``: rows/s of the changelog read with ``numPartitions`` ranges
against the single-range read of the same topic in the same run (a ratio);
results: ``bench/results/spark_changelog.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

import pulsar
from pyspark.sql import DataFrame, SparkSession

from bench.common import Comparison, broker, fill_map, write_report
from pulsar_state import StateConfig
from pulsar_state.connectors.spark_source import PulsarStateDataSource
from pulsar_state.topic_names import full_topic_name


def raw_reader_rate(service_url: str, topic: str) -> float:
    """Messages/s of a bare pulsar-client ``Reader`` loop over the topic: the
    ceiling of any Python consumer of it, whatever it does with the messages."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(
            topic, pulsar.MessageId.earliest, receiver_queue_size=10_000, is_read_compacted=True
        )
        count = 0
        t0 = time.perf_counter()
        while reader.has_message_available():
            msg = reader.read_next(timeout_millis=30_000)
            msg.partition_key(), msg.data(), msg.properties(), msg.message_id()
            count += 1
        elapsed = time.perf_counter() - t0
        reader.close()
        return count / elapsed
    finally:
        client.close()


_BUSY = (
    "taken on a busy shared machine: other jobs ran beside this one, so the absolute "
    "figures are low and noisy; compare the ratio"
)


def _session() -> SparkSession:
    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(PulsarStateDataSource)
    return spark


def changelog(keys: int, rounds: int, partitions: int) -> None:
    """The changelog read in ``partitions`` ranges vs one range, same topic, same run."""
    comparison = Comparison(
        f"changelog of {keys:,} puts, {partitions} ranges vs 1",
        "rows/s",
        "> 1 (parallel faster)",
        True,
        reference_name="numPartitions=1",
    )
    load = [os.getloadavg()[0]]
    with broker() as (service_url, admin_url):
        topic = full_topic_name(f"bench-spark-log-{uuid.uuid4().hex[:8]}")
        fill_map(
            service_url,
            admin_url,
            topic,
            keys,
            lambda i: f"value-{i}",
            config=StateConfig(compaction_threshold_bytes=0),
            chunk=1000,
        )
        spark = _session()
        try:

            def frame(n: int) -> DataFrame:
                return (
                    spark.read.format("pulsar_state")
                    .option("serviceUrl", service_url)
                    .option("adminUrl", admin_url)
                    .option("topic", topic)
                    .option("mode", "changelog")
                    .option("valueFormat", "string")
                    .option("numPartitions", str(n))
                    .load()
                )

            # correctness, untimed: the same rows (count and a checksum over every column)
            digest = ["count(*) AS n", "sum(crc32(concat_ws('|', key, value, position))) AS h"]
            one, many = (frame(n).selectExpr(*digest).collect()[0] for n in (1, partitions))
            if tuple(one) != tuple(many) or one.n != keys:
                raise SystemExit(
                    f"changelog rows differ: 1 range {one}, {partitions} ranges {many}"
                )
            for round_ in range(rounds):
                for n, out in ((1, comparison.reference), (partitions, comparison.ours)):
                    t0 = time.perf_counter()
                    frame(n).write.format("noop").mode("overwrite").save()
                    out.append(keys / (time.perf_counter() - t0))
                load.append(os.getloadavg()[0])
                print(
                    f"round {round_ + 1}: 1 range {comparison.reference[-1]:,.0f} rows/s, "
                    f"{partitions} ranges {comparison.ours[-1]:,.0f} rows/s",
                    flush=True,
                )
        finally:
            spark.stop()
    busy = max(load) > (os.cpu_count() or 1)
    path = write_report(
        "spark_changelog",
        "Spark source: changelog read, parallel ranges vs one",
        [comparison],
        f"""
`spark.read.format("pulsar_state")` with `mode=changelog` (`valueFormat=string`) over
a map of {keys:,} keys written by `PulsarMap.put_all` in writes of 1,000 keys,
materialized with the `noop` sink in a `local[2]` session: `numPartitions={partitions}`
(disjoint ranges of whole entries, each task with its warm-up) against
`numPartitions=1`, alternating in each round. Before timing, both reads were
checked to give the same rows (count and a checksum of key, value and position).

1-minute load average during the run: {", ".join(f"{x:.1f}" for x in load)}
({_BUSY if busy else "no other load of note"}).
""",
    )
    print(path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mode", choices=("snapshot", "changelog"), default="snapshot")
    parser.add_argument("--partitions", type=int, default=2, help="changelog: ranges")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.mode == "changelog":
        changelog(args.keys, args.rounds, args.partitions)
        return
    comparison = Comparison(
        f"snapshot of {args.keys:,} keys",
        "rows/s",
        ">= 500k rows/s (absolute)",
        True,
        reference_name="spark.range",
    )
    ceiling = Comparison(
        f"snapshot of {args.keys:,} keys vs a bare Python reader",
        "rows/s",
        "(the Python client's ceiling)",
        True,
        reference_name="Reader loop (msgs/s)",
    )
    with broker() as (service_url, admin_url):
        topic = full_topic_name(f"bench-spark-{uuid.uuid4().hex[:8]}")
        started = time.perf_counter()
        fill_map(
            service_url,
            admin_url,
            topic,
            args.keys,
            lambda i: f"value-{i}",
            config=StateConfig(compaction_threshold_bytes=0),  # no automatic compaction mid-fill
        )
        print(f"filled {args.keys:,} keys in {time.perf_counter() - started:.1f}s", flush=True)
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(PulsarStateDataSource)
        try:
            for round_ in range(args.rounds):
                ours = (
                    spark.read.format("pulsar_state")
                    .option("serviceUrl", service_url)
                    .option("adminUrl", admin_url)
                    .option("topic", topic)
                    .option("valueFormat", "string")
                    .load()
                )
                t0 = time.perf_counter()
                ours.write.format("noop").mode("overwrite").save()
                comparison.ours.append(args.keys / (time.perf_counter() - t0))
                ref = spark.range(args.keys).selectExpr(
                    "cast(id as string) as key", "cast(id as string) as value"
                )
                t0 = time.perf_counter()
                ref.write.format("noop").mode("overwrite").save()
                comparison.reference.append(args.keys / (time.perf_counter() - t0))
                ceiling.ours.append(comparison.ours[-1])
                ceiling.reference.append(raw_reader_rate(service_url, topic))
                print(f"round {round_ + 1}: {comparison.ours[-1]:,.0f} rows/s", flush=True)
        finally:
            spark.stop()
    path = write_report(
        "spark",
        "Spark source: snapshot read throughput",
        [comparison, ceiling],
        f"""
`spark.read.format("pulsar_state")` (snapshot mode, `valueFormat=string`) over a
map of {args.keys:,} keys written by `PulsarMap.put_all` in writes of 5,000 keys
and ended with `PulsarMap.checkpoint()`, so the read is the checkpoint's chunks in
parallel tasks plus the raw tail after it (`checkpoint=false` replays the topic),
materialized with the `noop` sink in a `local[2]` session; reference:
`spark.range` with the same two string columns in the same session. The second
row sets the source against a bare `pulsar-client` `Reader` loop over the same
topic (`read_next` and the message's key, payload, properties and id; nothing
decoded): what any Python reader of the topic can reach on this machine.
""",
    )
    print(path.read_text())


if __name__ == "__main__":
    main()
