"""Single-file entry point for ``--py``: the worker imports this module by file name."""

from pulsar_state.functions.scheduler_function import SchedulerFunction

__all__ = ["SchedulerFunction"]
