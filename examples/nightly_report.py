"""One report at a time across many workers: a lock with a fencing token, and a
leader that schedules while it leads.

    python examples/nightly_report.py --service-url pulsar://localhost:6650 \\
        --admin-url http://localhost:8080

Run it in several terminals: one leads, the others wait their turn; the lock
lets one worker write the report at a time, and its fencing token lets the
report's store refuse a writer that lost the lock meanwhile.
"""

from __future__ import annotations

import argparse
import os
import socket

import pulsar

from pulsar_state import CoordinationService, MetadataStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service-url", default="pulsar://localhost:6650")
    parser.add_argument("--admin-url", default="http://localhost:8080")
    parser.add_argument("--topic", default="persistent://public/default/reports-meta")
    args = parser.parse_args()
    me = f"{socket.gethostname()}:{os.getpid()}"

    client = pulsar.Client(args.service_url)
    try:
        with MetadataStore(client, args.topic, admin_url=args.admin_url) as store:
            coord = CoordinationService[str](store)
            # a number no other worker gets: the report's id
            report_id = coord.get_next_counter_value("/counters/report").result(30)
            with coord.lock("/locks/nightly-report", me, timeout_s=60) as lock:
                # hand lock.fencing_token to the report's store with each write
                print(f"report {report_id} by {me}, fencing token {lock.fencing_token}")
            leader = coord.become_leader("/leader/scheduler", me).result(60)
            print(f"{me} leads the scheduler (token {leader.fencing_token})")
            leader.release().result(30)
            coord.close()
    finally:
        client.close()


if __name__ == "__main__":
    main()
