"""``--py`` entry point: the SQL sink inside the functions runtime (no output topic)."""

from pulsar_state.connectors.sink_function import SinkFunction

__all__ = ["SinkFunction"]
