"""The project's exceptions: one root, subclasses that carry data.

Every public call of ``pulsar_state`` raises a :class:`PulsarStateError` (or a
subclass) for failures it knows about; Pulsar client errors are wrapped with
``raise ... from exc`` so the original stays reachable as ``__cause__``.
``retriable`` tells a caller whether trying the same call again can succeed.
The launcher's errors (embedded broker, ``pulsar-admin``, deployed functions)
live with the launcher, in :mod:`pulsar_state.deploy.errors`, under the same root.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = [
    "AdminUnreachableError",
    "PermissionDeniedError",
    "BadVersionError",
    "ConfigurationError",
    "PulsarStateError",
    "InvalidMessageError",
    "CheckpointError",
    "InvalidTopicNameError",
    "MessageHeldBackError",
    "PoisonRecordError",
    "FencedError",
    "ForkedProcessError",
    "NotFoundError",
    "TopicNotFoundError",
    "ResourceBusyError",
    "SessionLostError",
    "OperationTimeoutError",
    "StateClosedError",
    "StateTopicError",
    "TooManyOpsError",
    "ValueTooLargeError",
    "WatchOverflowError",
    "WriteFailedError",
    "WriteInDoubtError",
]


E = TypeVar("E", bound=BaseException)


class PulsarStateError(Exception):
    """Root of every error raised by pulsar-shared-state."""

    retriable: bool = False


class ConfigurationError(PulsarStateError, ValueError):
    """A configuration value is missing, of the wrong type or out of range."""


# -- the state core --------------------------------------------------------------


class StateClosedError(PulsarStateError):
    """The manager (or map) was closed, or failed and stopped."""

    def __init__(self, message: str = "the state manager is closed") -> None:
        super().__init__(message)


class ForkedProcessError(StateClosedError):
    """An object made in a parent process was used in a forked child.

    A manager, map or store (and a ``pulsar.Client`` that pulsar-shared-state
    has used) belongs to the process that made it: its threads and connections
    do not survive ``fork()``. The child must create its own client and objects.
    ``created_pid`` is the process that made the object, ``current_pid`` this one.
    """

    def __init__(self, what: str, *, created_pid: int, current_pid: int) -> None:
        self.created_pid = created_pid
        self.current_pid = current_pid
        super().__init__(
            f"{what} was created in process {created_pid} and cannot be used in this "
            f"process ({current_pid}), a fork of it: its threads and connections do not "
            "survive fork(); create a new pulsar.Client and new pulsar_state objects in "
            "this process (after the fork)"
        )


class StateTopicError(PulsarStateError):
    """The state topic is unusable: missing, partitioned, unprotected, not permitted."""


class InvalidTopicNameError(StateTopicError, ConfigurationError):
    """A topic name that is not ``[persistent://]tenant/namespace/name`` (or a bare name),
    or a partition where a state topic is needed (see :mod:`pulsar_state.topic_names`)."""


class TopicNotFoundError(StateTopicError, LookupError):
    """A read-only open of a topic that does not exist (a read never creates one)."""


class AdminUnreachableError(StateTopicError, ConnectionError):
    """The Pulsar admin API did not answer (connection refused, timed out, 5xx)
    within the admin client's retry window."""

    retriable = True


class PermissionDeniedError(StateTopicError, PermissionError):
    """The broker refused this client's role (authentication or authorization).

    Never retried: produce, consume or admin permission is missing for the
    role the client authenticates as (or it did not authenticate).
    """


class FencedError(PulsarStateError):
    """Another writer took the topic over (PIP-68 fencing) while this one wrote.

    Raised to callers only when retries are exhausted: a write that is fenced is
    otherwise re-run by the manager after catching up. ``epoch`` is the writer
    epoch that was lost.
    """

    retriable = True

    def __init__(self, message: str, *, epoch: int | None = None) -> None:
        self.epoch = epoch
        super().__init__(message)


class WriteFailedError(PulsarStateError):
    """A write could not be published; ``attempts`` tells how often it was tried."""

    retriable = True

    def __init__(self, message: str, *, attempts: int) -> None:
        self.attempts = attempts
        super().__init__(message)


class WriteInDoubtError(PulsarStateError):
    """A write was sent but its outcome is unknown: it may have landed or not.

    Raised when its retry budget ran out before the writer could settle it
    (gain the topic again and read from the log whether it landed), e.g. while
    the broker stays away. Not a failure: read the state back (a latest read)
    to know. ``attempts`` tells how often it was tried.
    """

    retriable = False

    def __init__(self, message: str, *, attempts: int) -> None:
        self.attempts = attempts
        super().__init__(message)

    @classmethod
    def unread(cls, attempts: int, cause: BaseException) -> WriteInDoubtError:
        """The write was sent, and the reader stopped (``cause``) before it was applied."""
        return cls(
            f"sent, but the reader stopped before it was applied ({cause}); it may have "
            "landed: read it back to know",
            attempts=attempts,
        )

    @classmethod
    def unsettled(cls, attempts: int, cause: BaseException) -> WriteInDoubtError:
        """The write could not be settled: the topic was not gained (``cause``)."""
        return cls(
            f"sent, but its outcome is unknown after {attempts} attempts (the topic could "
            f"not be gained to settle it: {cause}); it may have landed: read it back to know",
            attempts=attempts,
        )


class OperationTimeoutError(PulsarStateError, TimeoutError):
    """An operation did not complete within its deadline."""

    retriable = True


class ValueTooLargeError(PulsarStateError, ValueError):
    """A write is larger than one Pulsar entry may be (``max_write_bytes``)."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"write of {size} bytes exceeds max_write_bytes={limit}")


class TooManyOpsError(ValueTooLargeError):
    """A write holds more ops than ``max_ops_per_write`` allows.

    ``count`` is the number of ops the write had, ``limit`` the configured
    maximum. A :class:`ValueTooLargeError`, so code that catches the broader
    "this write is too large" keeps working.
    """

    def __init__(self, count: int, limit: int) -> None:
        self.count = count
        self.size = count
        self.limit = limit
        PulsarStateError.__init__(
            self,
            f"write of {count} ops exceeds max_ops_per_write={limit}: split it into "
            "smaller writes or raise StateConfig(max_ops_per_write=...)",
        )


def fresh(exc: E) -> E:
    """``exc`` anew (same type, message and fields, no traceback): to raise one
    stored error many times, each raise stacking its frames on one object."""
    again = type(exc).__new__(type(exc), *exc.args)
    again.__dict__.update(exc.__dict__)
    return again


class InvalidMessageError(PulsarStateError):
    """A message on the state topic could not be decoded or applied.

    Raised when the manager is configured with ``on_invalid_message="fail"``;
    with ``"skip"`` (the default) such messages are logged, counted and skipped.
    """

    def __init__(self, message: str, *, position: str) -> None:
        self.position = position
        super().__init__(f"{message} (at {position})")


class CheckpointError(PulsarStateError):
    """A map's checkpoint is missing a part, undecodable, or could not be written.

    Never fatal to the map: a checkpoint it cannot read is logged and counted,
    and it replays the topic instead; a failed write only leaves an older one.
    """


class WatchOverflowError(PulsarStateError):
    """A map watch fell so far behind (its callback too slow for the writes)
    that it was ended rather than queue without bound.

    Nothing is lost: the watch ended after a whole write, and a new watch with
    ``from_position=watch.position`` replays every change after it.
    """

    def __init__(self, message: str, *, position: object) -> None:
        self.position = position
        super().__init__(message)


class MessageHeldBackError(PulsarStateError):
    """A function's input message comes after an earlier one of its partition that failed.

    Refused so that the runtime redelivers it after that one: a kit recording
    "processed up to here" must never record past a message that did not succeed.
    """

    retriable = True


class PoisonRecordError(PulsarStateError, ValueError):
    """A record the SQL sink can never write: no key, or a key or value that is not UTF-8."""


class BadVersionError(PulsarStateError):
    """A compare-and-set found another version than the expected one."""

    def __init__(self, key: str, *, expected: object, actual: object) -> None:
        self.key = key
        self.expected_version = expected
        self.actual_version = actual
        super().__init__(f"{key!r}: expected version {expected!r}, found {actual!r}")


class ResourceBusyError(PulsarStateError):
    """A lock (or leadership) is held by someone else."""

    def __init__(self, path: str, holder: object = None) -> None:
        self.path = path
        self.holder = holder
        super().__init__(f"{path} is held by another session")


class NotFoundError(PulsarStateError, KeyError):
    """The key or path does not exist."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "not found"


class SessionLostError(PulsarStateError):
    """An ephemeral node asked of a metadata store whose session is lost (as
    ZooKeeper's session-expired): it would be deleted at once; wait for the
    session to come back (``SESSION_REESTABLISHED``)."""
