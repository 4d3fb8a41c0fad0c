"""The Spark source on an older PySpark: a part it lacks is refused clearly (issue #28, item 9).

Batch reads need PySpark 4.0; key pushdown needs the filter classes of 4.1 and
streams ``SupportsTriggerAvailableNow`` of 4.2. The source imports each only
when a query asks for it, so that an older PySpark runs the rest; here the
newer modules are made unimportable, as on the older release. (``make
check-min-deps`` runs the same on a real PySpark 4.0.)
"""

from __future__ import annotations

import sys

import pyspark.sql.datasource
import pytest

from pulsar_state.connectors.spark_source import PulsarStateDataSource
from pulsar_state.errors import ConfigurationError

BASE = {
    "serviceUrl": "pulsar://127.0.0.1:6650",
    "adminUrl": "http://127.0.0.1:8080",
    "topic": "persistent://public/default/t",
}


@pytest.fixture
def without_streaming(monkeypatch: pytest.MonkeyPatch) -> None:
    """PySpark < 4.2: no pyspark.sql.streaming.datasource (and our stream module unloaded)."""
    monkeypatch.setitem(sys.modules, "pyspark.sql.streaming.datasource", None)
    monkeypatch.delitem(sys.modules, "pulsar_state.connectors.spark_stream", raising=False)


@pytest.mark.usefixtures("without_streaming")
def test_a_stream_read_on_the_driver_names_the_release_it_needs() -> None:
    source = PulsarStateDataSource({**BASE, "mode": "changelog"})
    with pytest.raises(ConfigurationError, match=r"a streaming read needs PySpark >= 4\.2"):
        source.simpleStreamReader(None)  # type: ignore[arg-type]


@pytest.mark.usefixtures("without_streaming")
def test_a_parallel_stream_read_names_the_release_it_needs() -> None:
    source = PulsarStateDataSource({**BASE, "mode": "changelog", "numPartitions": "2"})
    with pytest.raises(ConfigurationError, match=r"needs PySpark >= 4\.2; this is PySpark"):
        source.streamReader(None)  # type: ignore[arg-type]


def test_pushdown_names_the_release_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(pyspark.sql.datasource, "EqualTo")
    source = PulsarStateDataSource({**BASE, "pushdown": "true"})
    with pytest.raises(ConfigurationError, match=r"pushdown=true needs PySpark >= 4\.1"):
        source.reader(None)  # type: ignore[arg-type]


def test_the_batch_source_loads_without_the_streaming_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Importing the source (what Spark's registration does) needs no 4.2 module."""
    monkeypatch.setitem(sys.modules, "pyspark.sql.streaming.datasource", None)
    for name in ("pulsar_state.connectors.spark_stream", "pulsar_state.connectors.spark_source"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import pulsar_state.connectors.spark_source as reloaded  # noqa: PLC0415

    assert reloaded.PulsarStateDataSource.name() == "pulsar_state"
    assert "pulsar_state.connectors.spark_stream" not in sys.modules
