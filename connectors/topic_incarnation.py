"""Whether the position a SQL sink stored for a topic belongs to that topic as it is now.

The sink stores, per topic name, the last applied position and skips a record
at or before it as a redelivery. A stored position can outlive the topic it
was taken from: the database was restored from a backup taken next to another
cluster, the cluster was rebuilt (a standalone whose data directory was wiped
starts its ledger ids again near 0), or the topic was deleted and re-created
on a cluster whose ledger ids do not keep growing. The topic's records then
start below the stored position and every one of them would be skipped.

:class:`PositionGuard` is asked only on that skip path, never for a record
that moves the position forward, so the normal case costs nothing. It reads
the topic's managed-ledger range from the admin API (``internalStats``:
``ledgers`` and ``lastConfirmedEntry``), once per redelivery burst (the range
is cached and fetched again only when it no longer holds the stored position).
A stored position in one of the topic's ledgers and not past its last entry is
of this topic: the record is a redelivery and is skipped. Otherwise the stored
position is of another incarnation: a WARNING names both positions and the
topic's range, ``pulsar_state_sink_position_checks{outcome="reset"}`` counts
it, and the record is applied, replacing the stored position in the same
transaction as its row (``positionMismatch: reset``, the default), or
:class:`TopicIncarnationError` stops the sink on that record
(``positionMismatch: fail``), nothing applied, nothing acknowledged.

The check uses the sink's admin authentication and TLS trust (in a function:
the secret ``adminToken`` and user config ``tlsTrustCertsFilePath`` /
``tlsAllowInsecureConnection``; in the runner: its ``--auth-*`` and ``--tls-*``
options). Without ``adminUrl``, or when the admin API refuses the call (401,
403, 404), the check cannot be made: the record is skipped as before, with a WARNING
(once per topic and reason) and ``outcome="unverified"`` counted per record.
An admin API that does not answer raises a *retriable* TopicIncarnationError:
the record is neither applied nor skipped, it is tried again.

Limitation: a range check cannot tell two incarnations apart when the stored
position happens to fall inside the new topic's ledgers (another cluster whose
ledger ids overlap exactly there).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from prometheus_client import Counter

from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.connectors.sql_backend import SinkDatabaseError
from pulsar_state.errors import AdminUnreachableError, ConfigurationError
from pulsar_state.position import Position
from pulsar_state.topic_names import parse_topic

__all__ = [
    "MISMATCH_MODES",
    "POSITION_CHECKS",
    "PositionGuard",
    "TopicIncarnationError",
    "TopicRange",
]

log = logging.getLogger(__name__)

POSITION_CHECKS = Counter(
    "pulsar_state_sink_position_checks",
    "Records at or before the sink's stored position, by what the check found: redelivery "
    "(skipped), reset (the stored position was of another topic incarnation; applied), "
    "refused (positionMismatch: fail), unverified (no admin API to check; skipped)",
    ["topic", "outcome"],
)

#: the values of the sink config's ``positionMismatch``
MISMATCH_MODES = ("reset", "fail")


def _stats_path(topic: str) -> str:
    """The admin API path of ``topic``'s internal stats (a partition's name is fine here)."""
    name = parse_topic(topic, what="the record's topic")
    parts = (name.tenant, name.namespace, name.local_name)
    return (
        f"/admin/v2/{name.domain}/" + "/".join(quote(p, safe="") for p in parts) + "/internalStats"
    )


class TopicIncarnationError(SinkDatabaseError):
    """The stored position is not of the topic as it is now (or could not be checked yet)."""


@dataclass(frozen=True)
class TopicRange:
    """The ledgers a topic holds now and its last confirmed entry."""

    ledgers: frozenset[int]
    last_ledger: int
    last_entry: int

    @classmethod
    def from_internal_stats(cls, stats: Mapping[str, Any]) -> TopicRange:
        ledgers = frozenset(int(item["ledgerId"]) for item in stats.get("ledgers") or [])
        ledger, _, entry = str(stats.get("lastConfirmedEntry") or "-1:-1").partition(":")
        return cls(ledgers, int(ledger), int(entry or -1))

    def holds(self, position: Position) -> bool:
        """Whether ``position`` is in one of the ledgers and not past the last entry."""
        return position.ledger in self.ledgers and (position.ledger, position.entry) <= (
            self.last_ledger,
            self.last_entry,
        )

    def __str__(self) -> str:
        first = min(self.ledgers) if self.ledgers else None
        return (
            f"ledgers {first}..{self.last_ledger} ({len(self.ledgers)}), "
            f"last entry {self.last_ledger}:{self.last_entry}"
        )


class PositionGuard:
    """Decides, on the sink's skip path, between a redelivery and a foreign stored position."""

    def __init__(
        self,
        *,
        admin: AdminEndpoint | None,
        mode: str = "reset",
        logger: Any = None,
        timeout_s: float = 10.0,
        retry_s: float = 30.0,
    ) -> None:
        """``admin``: the admin API with the authentication and TLS trust the sink's
        other admin calls have (``None``: positions are not checked, counted as
        unverified)."""
        if mode not in MISMATCH_MODES:
            raise ConfigurationError(
                f"sink 'positionMismatch' must be one of {', '.join(MISMATCH_MODES)}, got {mode!r}"
            )
        if admin is not None and not isinstance(admin, AdminEndpoint):
            raise ConfigurationError(f"admin must be an AdminEndpoint, got {admin!r}")
        self.mode = mode
        self._log = logger or log
        self._admin = (
            admin.admin(timeout_s=timeout_s, retry_s=retry_s) if admin is not None else None
        )
        self._ranges: dict[str, TopicRange] = {}
        self._warned: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        #: outcome -> count, for this sink (the Prometheus counter is per process)
        self.counts: dict[str, int] = {}

    def _count(self, topic: str, outcome: str) -> None:
        POSITION_CHECKS.labels(topic, outcome).inc()
        with self._lock:
            self.counts[outcome] = self.counts.get(outcome, 0) + 1

    def _unverified(self, topic: str, stored: Position, why: str) -> bool:
        self._count(topic, "unverified")
        if (topic, why) not in self._warned:
            self._warned.add((topic, why))
            self._log.warning(
                "%s: skipping records at or before the stored position %s without checking "
                "that it is of this topic (%s); a topic re-created or a database restored "
                "from another cluster would lose records here",
                topic,
                stored,
                why,
            )
        return True

    def _range(self, topic: str) -> TopicRange | str:
        """The topic's range from the admin API, or why it cannot be had."""
        assert self._admin is not None
        try:
            resp = self._admin.request("GET", _stats_path(topic))
        except AdminUnreachableError as exc:
            raise TopicIncarnationError(
                f"{topic}: cannot check the stored position against the topic: {exc}",
                retriable=True,
            ) from exc
        if resp.status_code != 200:
            return f"internalStats answered {resp.status_code}: {resp.text[:200]}"
        found = TopicRange.from_internal_stats(resp.json())
        self._ranges[topic] = found
        return found

    def is_of_topic(self, topic: str, stored: Position) -> bool | None:
        """Whether ``stored`` is a position the topic has now (``None``: cannot tell).

        Uses the cached range when it holds ``stored``, else fetches it again.
        """
        if self._admin is None:
            return None
        cached = self._ranges.get(topic)
        if cached is not None and cached.holds(stored):
            return True
        found = self._range(topic)
        return found.holds(stored) if isinstance(found, TopicRange) else None

    def is_redelivery(self, topic: str, position: Position, stored: Position) -> bool:
        """``True``: skip the record at ``position`` (at or before ``stored``).

        ``False``: ``stored`` is of another incarnation of the topic, the record
        is to be applied in its place (logged and counted). Raises
        TopicIncarnationError in ``fail`` mode, or (retriable) when the admin
        API does not answer.
        """
        if self._admin is None:
            return self._unverified(topic, stored, "no adminUrl in the sink config")
        cached = self._ranges.get(topic)
        if cached is not None and cached.holds(stored):
            self._count(topic, "redelivery")
            return True
        found = self._range(topic)
        if isinstance(found, str):
            return self._unverified(topic, stored, found)
        if found.holds(stored):
            self._count(topic, "redelivery")
            return True
        what = (
            f"{topic}: the stored position {stored} is not in the topic as it is now "
            f"({found}) but the record at {position} is: the topic was re-created, or the "
            "database holds positions of another cluster"
        )
        if self.mode == "fail":
            self._count(topic, "refused")
            self._log.error("%s; refusing (positionMismatch: fail)", what)
            raise TopicIncarnationError(
                f"{what}; refusing to write or skip it (positionMismatch: fail): remove the "
                f"topic's row from _pss_positions once the table is known to be right"
            )
        self._count(topic, "reset")
        self._log.warning("%s; applying the record and resetting the stored position to it", what)
        return False

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
