"""CoordinationService: locks, leader election and counters on a metadata store (PIP-45).

A lock is an ephemeral node: whoever creates it (expected version ``-1``) holds
it until releasing it or until its session dies (see
:mod:`pulsar_state.metadata.store` for the bound). Leadership is a lock that
candidates wait for. Counters are compare-and-set increments. Every lock comes
with a fencing token that grows with each acquisition: pass it along with side
effects and reject older ones.

Sessions (PIP-45's LockManager). When the store's session is lost, each held
lock hears ``LockEvent.SESSION_LOST``: its node may be gone, do not act as the
holder. While the session is not healthy, a deleted lock node is not taken as
a loss at once. When the session comes back, every held lock is revalidated
against the latest tree: still its own node, it is kept; gone, it is made
again (a new fencing token) and the lock hears ``REASSERTED``; someone else's,
the lock is lost (``LOST``, ``lost`` completes).
"""

from pulsar_state.coordination.lock import LockEvent, ResourceLock
from pulsar_state.coordination.service import CoordinationService

__all__ = ["CoordinationService", "LockEvent", "ResourceLock"]
