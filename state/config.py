"""Configuration of a state manager: one frozen, validated, keyword-only value."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Literal

from pulsar_state.errors import ConfigurationError
from pulsar_state.retry import RetryPolicy

__all__ = ["DEFAULT_COMPACTION_THRESHOLD_BYTES", "AccessMode", "StateConfig"]

#: automatic compaction threshold of keyed recipes (maps, metadata) unless configured
DEFAULT_COMPACTION_THRESHOLD_BYTES = 16 * 1024 * 1024

AccessMode = Literal["adaptive", "fencing", "wait", "exclusive"]
_ACCESS_MODES = ("adaptive", "fencing", "wait", "exclusive")
_ON_INVALID = ("skip", "fail")


@dataclass(frozen=True, kw_only=True)
class StateConfig:
    """Knobs of :class:`~pulsar_state.SharedStateManager` (all optional).

    Attributes:
        access_mode: how a writer gains the topic (PIP-68). ``"adaptive"``
            (the default): queue behind the holder (``WaitForExclusive``); a
            holder lets go when idle for ``idle_release_s`` and after holding
            for ``max_tenure_s``, so waiting writers get their turn; only when
            the holder has not let go within the ``pulsar.Client``'s
            ``operation_timeout_seconds`` (not ``operation_timeout_s`` here),
            and nobody else gained the topic meanwhile
            (a frozen or cut-off process, an orphaned producer) take it over
            with ``ExclusiveWithFencing``. No live holder is fenced in normal
            operation, which Pulsar 4.0.8 can deadlock on (see
            ``docs/findings/``). ``"fencing"``: always take over at once; the
            previous holder's unfinished write is re-run by it. ``"wait"``:
            queue, never fence. ``"exclusive"``: fail over to a retry while
            another holds it.
        idle_release_s: let the producer go after this long without writes
            (``None``: keep it until closed or fenced, the default in fencing
            mode; 0.05 s in the queueing modes).
        max_tenure_s: in the queueing modes, let the producer go after holding
            it this long, once no write is in flight (``None``: no limit). With
            an admin API (``admin_url``/``admin``), a holder asks the broker
            near the end of each tenure whether another writer waits for the
            topic, and keeps it for another tenure while none does; without
            one, every tenure ends.
        retry: how often and how long a fenced or failed write is re-run.
        operation_timeout_s: Pulsar operation timeout and default wait bound.
        send_timeout_s: how long one publish may take before it counts as failed.
        max_write_bytes: the largest write (one entry); Pulsar's default
            ``maxMessageSize`` is 5 MiB.
        max_ops_per_write: the most ops one write may hold.
        on_invalid_message: ``"skip"`` (log, count, skip the whole write) or
            ``"fail"`` (stop the manager with :class:`InvalidMessageError`).
        read_compacted: bootstrap from the compacted view (bounded recovery).
        ensure_retention: set infinite retention and no inactive-topic deletion
            on the topic (needs ``admin_url``); a failure is an error.
        compaction_threshold_bytes: topic compaction threshold to set for
            compactable (keyed, last-value-wins) state; ``None``: the recipe's
            default (:data:`DEFAULT_COMPACTION_THRESHOLD_BYTES` for ``PulsarMap``
            and ``MetadataStore``; left alone by the generic manager); ``0``
            turns the broker's automatic compaction off for the topic.
        subscription_prefix: prefix of each manager's own tail subscription.
        max_takeovers_per_s: how many times a second this writer may fence
            another to take the topic over (``"fencing"`` mode, and the
            fallback of ``"adaptive"``), on average (a token bucket
            of ``takeover_burst``; :mod:`pulsar_state.core.write.takeover`). A failover is
            immediate; under contention a writer that keeps losing the topic
            waits for its turn, and the holder writes all it has queued.
            ``None``: unbounded (Pulsar 4.0.8 can deadlock under hundreds of
            takeovers a second; see ``docs/findings/``).
        takeover_burst: takeovers allowed back to back before the rate applies.
        commit_on_ack: complete a write at the broker's acknowledgement, the
            writer applying it to the local state itself (in log order, once),
            instead of when the tail brings it back. Only when nothing can lie
            in between: the entry directly follows the writer's previous one
            (or its epoch marker) in the same ledger, and the state stands
            there. ``False``: the tail completes every write (one more
            dispatch round trip per write).
        direct_writes: deprecated, no effect. Every write goes through the
            writer's thread (docs/state.md, *The write path*); the direct
            path, where the calling thread sent, was removed for the races it
            brought.
    """

    access_mode: AccessMode = "adaptive"
    idle_release_s: float | None = None
    max_tenure_s: float | None = 0.5
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    operation_timeout_s: float = 30.0
    send_timeout_s: float = 15.0
    max_write_bytes: int = 4 * 1024 * 1024
    max_ops_per_write: int = 50_000
    on_invalid_message: Literal["skip", "fail"] = "skip"
    read_compacted: bool = True
    ensure_retention: bool = True
    compaction_threshold_bytes: int | None = None
    subscription_prefix: str = "pss-tail-"
    max_takeovers_per_s: float | None = 5.0
    takeover_burst: int = 2
    commit_on_ack: bool = True
    direct_writes: bool | None = None

    def __post_init__(self) -> None:
        if self.access_mode not in _ACCESS_MODES:
            raise ConfigurationError(
                f"access_mode must be one of {_ACCESS_MODES}, got {self.access_mode!r}"
            )
        if self.on_invalid_message not in _ON_INVALID:
            raise ConfigurationError(
                f"on_invalid_message must be one of {_ON_INVALID}, got {self.on_invalid_message!r}"
            )
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigurationError(f"retry must be a RetryPolicy, got {self.retry!r}")
        for name in ("operation_timeout_s", "send_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise ConfigurationError(f"{name} must be a positive number, got {value!r}")
        if self.max_tenure_s is not None and (
            not isinstance(self.max_tenure_s, int | float) or self.max_tenure_s <= 0
        ):
            raise ConfigurationError(
                f"max_tenure_s must be a positive number or None, got {self.max_tenure_s!r}"
            )
        if self.idle_release_s is not None and self.idle_release_s < 0:
            raise ConfigurationError(f"idle_release_s must be >= 0, got {self.idle_release_s!r}")
        if not isinstance(self.max_write_bytes, int) or not self.max_write_bytes >= 1024:
            raise ConfigurationError(
                f"max_write_bytes must be >= 1024, got {self.max_write_bytes!r}"
            )
        if not isinstance(self.max_ops_per_write, int) or self.max_ops_per_write < 1:
            raise ConfigurationError(
                f"max_ops_per_write must be >= 1, got {self.max_ops_per_write!r}"
            )
        if self.compaction_threshold_bytes is not None and self.compaction_threshold_bytes < 0:
            raise ConfigurationError("compaction_threshold_bytes must be >= 0")
        if self.max_takeovers_per_s is not None and (
            not isinstance(self.max_takeovers_per_s, int | float) or self.max_takeovers_per_s <= 0
        ):
            raise ConfigurationError(
                f"max_takeovers_per_s must be a positive number or None, "
                f"got {self.max_takeovers_per_s!r}"
            )
        if not isinstance(self.takeover_burst, int) or self.takeover_burst < 1:
            raise ConfigurationError(f"takeover_burst must be >= 1, got {self.takeover_burst!r}")
        if not self.subscription_prefix:
            raise ConfigurationError("subscription_prefix must not be empty")
        if self.direct_writes is not None:
            warnings.warn(
                "StateConfig(direct_writes=...) has no effect any more: every write goes "
                "through the writer's thread",
                DeprecationWarning,
                stacklevel=3,
            )
        for name in ("read_compacted", "ensure_retention", "commit_on_ack"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(
                    f"{name} must be True or False, got {getattr(self, name)!r}"
                )

    def with_default_compaction(self, threshold_bytes: int) -> StateConfig:
        """This config, with ``threshold_bytes`` if no compaction threshold was chosen."""
        if self.compaction_threshold_bytes is not None:
            return self
        return replace(self, compaction_threshold_bytes=threshold_bytes)

    @property
    def effective_idle_release_s(self) -> float | None:
        """``idle_release_s``, or 0.05 s when writers queue for the topic (else ``None``)."""
        if self.idle_release_s is not None:
            return self.idle_release_s
        return 0.05 if self.queueing else None

    @property
    def queueing(self) -> bool:
        """Whether writers queue for the topic (and so let go of it in turn)."""
        return self.access_mode in ("adaptive", "wait")
