"""A Spark range read whose reader cannot be opened the first time tries once more.

Seen in a clean-clone CI run: a stream batch's warm-up reader subscribed while
its topic was being unloaded (the broker logged "ManagedLedger ... has already
been closed"), the client waited out its whole operation timeout, and the
micro-batch failed with "no message within 30000 ms" although the reloaded
topic served a new reader at once. The broker, topic and data here are real;
only the client's first ``create_reader`` is made to time out, as it did then,
because an unload landing inside a subscribe cannot be timed from a test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_topic

from pulsar_state import PulsarMap
from pulsar_state.connectors.spark_options import SourceOptions
from pulsar_state.connectors.spark_ranges import plan_ranges, replay_range


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

    def client(self: SourceOptions) -> Any:
        return _FirstOpenTimesOut(real_client(self))

    _FirstOpenTimesOut.opened = 0
    monkeypatch.setattr(SourceOptions, "client", client)
    yield _FirstOpenTimesOut


def _rows(opts: SourceOptions) -> list[tuple[str, int, int]]:
    end = opts.last_position()
    (rng,) = plan_ranges(opts, end, 1)
    rows: list[tuple[str, int, int]] = []
    replay_range(
        opts,
        rng,
        on_write=lambda change: rows.extend(
            (op.key, change.position.ledger, change.position.entry) for op in change.ops
        ),
    )
    return rows


def test_a_range_read_opens_its_reader_once_more(
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
        {"serviceUrl": pulsar_endpoint.service_url, "adminUrl": admin_url, "topic": topic}
    )
    flaky_opens.failures = 0
    expected = _rows(opts)
    assert [key for key, _, _ in expected] == [f"k{i}" for i in range(5)]

    flaky_opens.failures, flaky_opens.opened = 1, 0
    assert _rows(opts) == expected  # before: TimeoutError after the first timed-out open
    assert flaky_opens.opened == 2

    flaky_opens.failures, flaky_opens.opened = 2, 0
    with pytest.raises(TimeoutError, match="could not open a reader"):
        _rows(opts)
    assert flaky_opens.opened == 2
