"""Packaged Python Pulsar Functions that keep their state in pulsar_state."""
