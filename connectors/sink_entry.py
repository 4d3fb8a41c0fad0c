"""``--py`` entry point: the SQL sink inside the functions runtime (no output topic)."""

from pulsar_state.connectors.sink import SinkFunction

__all__ = ["SinkFunction"]
