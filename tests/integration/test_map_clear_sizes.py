"""``clear()`` at the sizes the docs name, with the default limits, on the broker.

One write (one entry) holds at most ``max_write_bytes`` (4 MiB), a delete costing
its key's length plus 96 bytes: 39,000 keys of 10 characters are cleared in one
write, 40,000 are refused before anything is written (issue #26, measured here
before the change: the same limit, with a message that named neither ``clear()``
nor what to do). The cleared keys stay gone once the topic is compacted.
"""

from __future__ import annotations

from collections.abc import Callable

import pulsar
import pytest
from harness import compact_topic, unique_topic

from pulsar_state import PulsarMap
from pulsar_state.errors import TooManyOpsError, ValueTooLargeError

T = 120


def _fill(m: PulsarMap[str, int], n: int) -> None:
    keys = [f"k{i:09d}" for i in range(n)]  # 10 characters
    for start in range(0, n, 20_000):
        m.put_all(dict.fromkeys(keys[start : start + 20_000], 1)).result(T)


def test_the_documented_size_is_cleared_in_one_write_and_stays_cleared_after_compaction(
    make_client: Callable[[], pulsar.Client], admin_url: str
) -> None:
    topic = unique_topic("clear-39k")
    with PulsarMap[str, int](make_client(), topic, admin_url=admin_url, checkpoints=False) as m:
        _fill(m, 39_000)
        assert m.clear().result(T) == 39_000
        m.put("written-after", 2).result(T)
        assert m.items(latest=True).result(T) == {"written-after": 2}
    compact_topic(admin_url, topic)
    with PulsarMap[str, int](make_client(), topic, admin_url=admin_url, checkpoints=False) as m:
        assert m.items().result(T) == {"written-after": 2}  # read from the compacted view
        assert m.manager.messages_read < 100


def test_a_map_one_write_cannot_clear_is_refused_before_anything_is_written(
    make_client: Callable[[], pulsar.Client], admin_url: str
) -> None:
    topic = unique_topic("clear-40k")
    with PulsarMap[str, int](make_client(), topic, admin_url=admin_url, checkpoints=False) as m:
        _fill(m, 40_000)
        with pytest.raises(ValueTooLargeError) as refused:
            m.clear().result(T)
        assert not isinstance(refused.value, TooManyOpsError)
        assert str(refused.value).startswith(
            "clear() of 40000 keys is one atomic write of 4240000 bytes"
        ), refused.value
        assert "nothing was deleted" in str(refused.value)
        assert m.size(latest=True).result(T) == 40_000  # not one key deleted
