"""A lock holder cut off from the broker (its sockets stay open) gives up its
lock before anyone else could take it (issue #25, defect 9, the holder half).

The holder's packets are dropped (iptables), so its connection looks alive on
both sides until a keep-alive gives up on it (30 s or more). Others can expire
the holder's session only ``session_timeout_s`` after the broker dropped its
session consumer; the holder's own client notices the dead connection on its
own keep-alive, which may come after the broker's. Before the session lease
the holder kept ``held`` True until then. Asserted, as an order of events and
not a duration: the holder reported its session lost, and every look it made
from then on said free, before the broker even dropped its consumer (the
moment from which others start counting toward expiring it).
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
from harness import PulsarEndpoint, unique_name, unique_topic, wait_until
from lease_holder import lease_holder, read_log
from network import connections, iptables_unavailable, partitioned

from pulsar_state.cluster.admin import PulsarAdmin
from pulsar_state.topic_names import full_topic_name, sessions_topic


def test_a_cut_off_holder_gives_up_before_the_broker_drops_it(
    broker_endpoint: PulsarEndpoint, tmp_path: Path
) -> None:
    reason = iptables_unavailable()
    if reason:
        pytest.skip(reason)
    broker_port = urlparse(broker_endpoint.service_url).port
    assert broker_port is not None
    topic, path = unique_topic("cut-holder"), f"/{unique_name('lock')}"
    out = tmp_path / "holder.log"
    holder = multiprocessing.get_context("spawn").Process(
        target=lease_holder,
        args=(broker_endpoint.service_url, broker_endpoint.admin_url, topic, path, str(out)),
        daemon=True,
    )
    holder.start()
    admin = PulsarAdmin(broker_endpoint.admin_url)
    try:
        wait_until(
            lambda: out.exists() and any(w == "held" for _, w in read_log(out)),
            timeout_s=120,
            message="the holder took the lock",
        )
        session = next(w.split()[1] for _, w in read_log(out) if w.startswith("session "))
        subscription = f"session-{session}"
        sessions = sessions_topic(full_topic_name(topic))

        def consumers() -> set[str]:
            """The session consumer's connections as the broker lists them
            (the client's address and port)."""
            subs = admin.stats(sessions).get("subscriptions", {})
            return {c.get("address", "") for c in subs.get(subscription, {}).get("consumers", [])}

        (cut_connection,) = consumers()
        assert holder.pid is not None
        ports = wait_until(
            lambda: connections(holder.pid, broker_port), message="the holder's connections"
        )
        with partitioned(ports):
            cut_at = time.monotonic()
            # dropped: the cut connection is no longer listed (the holder's client
            # may be back at once on a new connection, so "none listed" can be
            # too short a moment to see)
            wait_until(
                lambda: cut_connection not in consumers(),
                timeout_s=180,
                interval_s=0.1,
                message="the broker dropped the holder's session consumer",
            )
            dropped_at = time.monotonic()
    finally:
        holder.kill()
        holder.join(10)
        admin.close()
    rows = read_log(out)
    lost = [t for t, w in rows if w == "event session_lost" and cut_at < t]
    assert lost, "the holder never reported its session lost"
    assert lost[0] < dropped_at, "the holder reported its loss only after the broker dropped it"
    looks = [w for t, w in rows if lost[0] <= t < dropped_at and w in ("held", "free")]
    assert looks and set(looks) == {"free"}, looks[:20]
