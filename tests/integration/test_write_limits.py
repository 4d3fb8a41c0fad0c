"""The per-write limits name themselves: too many ops is its own error, with its own message."""

from __future__ import annotations

from typing import Any

import pytest
from harness import unique_topic

from pulsar_state import PulsarMap, StateConfig, TooManyOpsError, ValueTooLargeError


def test_a_write_with_too_many_ops_names_the_limit_and_the_count(
    make_client: Any, admin_url: str
) -> None:
    topic = unique_topic("ops-limit")
    config = StateConfig(max_ops_per_write=3)
    with PulsarMap[str, int](make_client(), topic, admin_url=admin_url, config=config) as m:
        m.put_all({"a": 1, "b": 2, "c": 3}).result(timeout=30)  # at the limit: written
        with pytest.raises(TooManyOpsError) as caught:
            m.put_all({f"k{i}": i for i in range(5)}).result(timeout=30)
        message = str(caught.value)
        assert "max_ops_per_write=3" in message, message
        assert "5 ops" in message, message
        assert "bytes" not in message, message
        assert (caught.value.count, caught.value.limit) == (5, 3)
        # still a ValueTooLargeError for callers that catch the broader error
        assert isinstance(caught.value, ValueTooLargeError)
        assert m.items(latest=True).result(timeout=30) == {"a": 1, "b": 2, "c": 3}
