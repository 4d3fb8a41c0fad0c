"""A Spark range read whose reader cannot be opened tries again within timeoutMs.

Seen in a clean-clone CI run: a stream batch's warm-up reader subscribed while
its topic was being unloaded (the broker logged "ManagedLedger ... has already
been closed"), the client waited out its whole operation timeout, and the
micro-batch failed with "no message within 30000 ms" although the reloaded
topic served a new reader at once. The broker, topic and data here are real;
the client's first ``create_reader`` calls are made to time out, so the count
of attempts and the errors are exact; test_spark_unload_race.py drives the
real race with an unload storm.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, range_rows, unique_topic

from pulsar_state import PulsarMap
from pulsar_state.connectors.spark_options import SourceOptions


class _FirstOpenTimesOut:
    """A real client whose first ``failures`` ``create_reader`` calls time out."""

    failures = 0
    opened = 0

    def __init__(self, real: pulsar.Client) -> None:
        self._real = real

    def create_reader(self, *args: Any, **kwargs: Any) -> pulsar.Reader:
        cls = type(self)
        cls.opened += 1
        if cls.opened <= cls.failures:
            raise pulsar.Timeout("subscribe timed out (the topic was being unloaded)")
        return self._real.create_reader(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # everything else: the real client
        return getattr(self._real, name)


@pytest.fixture
def flaky_opens(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_FirstOpenTimesOut]]:
    real_client = SourceOptions.client

    def client(self: SourceOptions, **kwargs: Any) -> Any:
        return _FirstOpenTimesOut(real_client(self, **kwargs))

    _FirstOpenTimesOut.opened = 0
    monkeypatch.setattr(SourceOptions, "client", client)
    yield _FirstOpenTimesOut


def test_a_range_read_opens_its_reader_again_within_its_timeout(
    pulsar_endpoint: PulsarEndpoint,
    client: pulsar.Client,
    admin_url: str,
    flaky_opens: type[_FirstOpenTimesOut],
) -> None:
    topic = unique_topic("range-retry")
    with PulsarMap[str, int](client, topic, admin_url=admin_url) as m:
        for i in range(5):
            m.put(f"k{i}", i).result(60)
    opts = SourceOptions.parse(
        {
            "serviceUrl": pulsar_endpoint.service_url,
            "adminUrl": admin_url,
            "topic": topic,
            "timeoutMs": "4000",
        }
    )
    flaky_opens.failures = 0
    expected = range_rows(opts)
    assert [key for key, _, _ in expected] == [f"k{i}" for i in range(5)]

    flaky_opens.failures, flaky_opens.opened = 1, 0
    assert range_rows(opts) == expected  # before: TimeoutError after the first timed-out open
    assert flaky_opens.opened == 2

    flaky_opens.failures, flaky_opens.opened = 3, 0
    assert range_rows(opts) == expected  # before: "could not open a reader ... (twice)"
    assert flaky_opens.opened == 4

    flaky_opens.failures, flaky_opens.opened = 10**6, 0
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"could not open a reader .* timeoutMs=4000"):
        range_rows(opts)
    assert 4.0 <= time.monotonic() - started < 30.0
    assert flaky_opens.opened > 4
