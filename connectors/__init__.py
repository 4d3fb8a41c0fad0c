"""Connectors: a Pulsar IO sink and a Spark data source over the shared state."""
