"""Scheduling function work: who runs what, and in which order.

Used by both :mod:`pulsar_state.functions` and :mod:`pulsar_state.connectors`
(and by neither of them through the other):

* :mod:`.assignment`: the assignment rule (round-robin with minimal movement);
* :mod:`.scheduler`: the in-process scheduling group (membership, leader,
  the published assignment) on a metadata store;
* :mod:`.in_order`: an instance's input in order, never past a failed message.
"""

from pulsar_state.scheduling.assignment import assign, instance_ids
from pulsar_state.scheduling.in_order import InOrderGate, redeliver_function, require_in_order
from pulsar_state.scheduling.scheduler import Scheduler, publish_assignment

__all__ = [
    # The assignment rule
    "assign",
    "instance_ids",
    # The in-process scheduler
    "Scheduler",
    "publish_assignment",
    # In-order processing
    "InOrderGate",
    "redeliver_function",
    "require_in_order",
]
