"""The packaged word count on ``pulsar-state worker``: what its tests share.

Its record (the packaged ``wordcount_entry.py``, unchanged, two instances in
order on a partitioned input), which instances consume a subscription, and
what must hold at the end: every word counted exactly once, every line's
output there once, naming its input. Used by
``tests/integration/test_functions_worker.py`` (the standalone) and
``tests/cluster/test_worker_through_any_broker.py`` (the cluster).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any, Protocol

import pulsar
import requests


class AdminApi(Protocol):
    """What answers an admin call (``harness.PulsarEndpoint`` and the cluster's)."""

    def admin(self, method: str, path: str, **kwargs: Any) -> requests.Response: ...


def word_count_config(
    name: str, admin_url: str, namespace: str = "public/default"
) -> dict[str, Any]:
    """The word count's record config: the packaged entry file, unchanged; its topics
    are ``<name>-in`` (the input), ``-out`` and ``-state`` in ``namespace``."""
    return {
        "py": str(resources.files("pulsar_state.functions") / "wordcount_entry.py"),
        "className": "wordcount_entry.WordCount",
        "inputs": [f"persistent://{namespace}/{name}-in"],
        "output": f"persistent://{namespace}/{name}-out",
        "parallelism": 2,
        "retainOrdering": True,
        "subscriptionPosition": "Earliest",
        "userConfig": {
            "stateTopic": f"persistent://{namespace}/{name}-state",
            "adminUrl": admin_url,
        },
    }


def subscription_consumers(endpoint: AdminApi, topic: str, subscription: str) -> list[str]:
    """The consumer names on ``subscription`` of each partition of ``topic``, sorted."""
    path = topic.removeprefix("persistent://")
    stats = endpoint.admin(
        "GET", f"/admin/v2/persistent/{path}/partitioned-stats?perPartition=true"
    )
    stats.raise_for_status()
    names: list[str] = []
    for partition in stats.json()["partitions"].values():
        consumers = partition["subscriptions"].get(subscription, {}).get("consumers", [])
        names.extend(c.get("consumerName", "") for c in consumers)
    return sorted(names)


def assert_counted_exactly(
    state: Mapping[str, Any], lines: Sequence[str], outputs: pulsar.Consumer
) -> None:
    """Each word of ``lines`` counted exactly once in the kit's ``state`` (its
    ``counter/`` keys), and each line's output on ``outputs`` once (a copy, if any,
    is the same) with the input's topic and message id."""
    counts = {k.removeprefix("counter/"): v for k, v in state.items() if k.startswith("counter/")}
    assert counts == dict(Counter(w for line in lines for w in line.split()))
    seen: dict[tuple[str, str], bytes] = {}
    while len(seen) < len(lines):
        message = outputs.receive(timeout_millis=60_000)
        props = message.properties()
        key = (props["__pfn_input_topic__"], props["__pfn_input_msg_id__"])
        assert seen.setdefault(key, message.data()) == message.data()
