"""``make bench-spark``: rows/s reading a snapshot of N keys with the pulsar_state source.

Reference in the same run and Spark session (local[2]): ``spark.range(N)`` with
the same two string columns. Both are materialized with the ``noop`` sink, so
the figure is the source's cost. Results: ``bench/results/spark.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

import pulsar
from pyspark.sql import SparkSession

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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
map of {args.keys:,} keys written by `PulsarMap.put_all` in writes of 5,000 keys,
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
