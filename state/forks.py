"""Fork safety: identities per process, and objects that stay in their process.

A process forked after ``import pulsar_state`` (multiprocessing's fork start
method, gunicorn ``--preload``, Celery prefork, Spark's forked Python workers)
starts with a copy of its parent's memory. Two things follow:

* Identities must not be copied. :func:`process_id` and :func:`next_seq` are
  made lazily for the process that asks (checked against ``os.getpid()``), so
  a forked child gets its own, never its parent's (the write ids of two forked
  writers used to collide, and each took the other's writes for its own).
* Threads and connections are not copied: a manager, map or store made in the
  parent, or a ``pulsar.Client`` the parent has already used, is dead in the
  child (a call would wait forever on a thread that does not exist there).
  :func:`check_process` and :func:`claim_client` turn such a use into an
  immediate :class:`~pulsar_state.errors.ForkedProcessError`.

* Native objects must not be destroyed in the child. The Pulsar C++ client's
  destructors (a consumer's, a producer's, a client's) wait on condition
  variables for threads that do not exist after ``fork()``: a child that
  garbage-collects one it inherited - a closed map's consumer left in a
  reference cycle, say - hangs for ever in ``pthread_cond_destroy``. Every
  client pulsar_state is given and every consumer, reader and producer it
  makes is registered here (:func:`keep_in_children`); in a forked child they
  are all kept alive until the process ends, so none is ever destroyed there.
  What the child makes itself is unaffected.

A ``pulsar.Client`` that the parent made but never used (no connection, no
thread yet) works in the child; one that the parent used outside
pulsar_state cannot be told apart here and hangs in the child: make clients
after forking.
"""

from __future__ import annotations

import itertools
import os
import uuid
import weakref
from typing import Any, TypeVar

from pulsar_state.errors import ForkedProcessError

__all__ = [
    "check_process",
    "claim_client",
    "keep_in_children",
    "next_seq",
    "process_id",
    "unique_id",
]


class _Identity:
    """This process's random id and its counter, made anew for another pid."""

    __slots__ = ("pid", "process_id", "seq")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.pid = os.getpid()
        self.process_id = uuid.uuid4().hex[:16]  # os.urandom: fork-safe
        self.seq = itertools.count()

    def current(self) -> _Identity:
        if self.pid != os.getpid():  # forked: a new identity for the child
            self.reset()
        return self


_IDENTITY = _Identity()

#: the process each pulsar.Client was first used in by pulsar_state
_client_pids: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def process_id() -> str:
    """A random id of this process (a forked child gets a new one)."""
    return _IDENTITY.current().process_id


def next_seq() -> int:
    """The next number of this process's counter (a forked child starts its own)."""
    return next(_IDENTITY.current().seq)


def unique_id() -> str:
    """``<process_id>-<next_seq>``: unique per process and per call (one lookup)."""
    identity = _IDENTITY.current()
    return f"{identity.process_id}-{next(identity.seq)}"


#: the Pulsar objects of this process (see the module docstring), weakly held
_natives: weakref.WeakSet[Any] = weakref.WeakSet()
#: in a forked child: the parent's objects, held for ever (never destroyed here)
_inherited: list[Any] = []

T = TypeVar("T")


def keep_in_children(obj: T) -> T:
    """Register a Pulsar client, consumer, reader or producer: a child forked
    from this process keeps it alive (its destructor would hang there)."""
    _natives.add(obj)
    return obj


def _after_fork_in_child() -> None:
    _IDENTITY.reset()
    # the parent's objects: never destroyed in this process (nor its children)
    _inherited.extend(_natives)
    _natives.clear()


# at once in a child forked through os.fork() (multiprocessing's fork start
# method too); current() covers identities for any other fork
os.register_at_fork(after_in_child=_after_fork_in_child)


def check_process(created_pid: int, what: str) -> None:
    """Raise :class:`ForkedProcessError` if this is not the process ``created_pid``."""
    pid = os.getpid()
    if pid != created_pid:
        raise ForkedProcessError(what, created_pid=created_pid, current_pid=pid)


def claim_client(client: Any) -> None:
    """Note that ``client`` is used in this process; refuse one used in a parent."""
    keep_in_children(client)
    pid = os.getpid()
    owner = _client_pids.setdefault(client, pid)
    if owner != pid:
        raise ForkedProcessError(
            "this pulsar.Client (used by pulsar_state before the fork)",
            created_pid=owner,
            current_pid=pid,
        )
