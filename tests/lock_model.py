"""A randomized check of lock ownership, shared by the memory and Pulsar tests.

Sessions acquire and release locks, sessions expire, an operator deletes lock
nodes, all at random. After every step: at most one lock object that believes it
holds carries the token of the node now there (checked at once), and once
notifications are through (a bounded wait) every lock that believes it holds is
the node's owner with the node's token, and every node has such a holder.
Fencing tokens of successive acquisitions strictly increase. A release by a
holder that is no longer the owner leaves the node as it was.

With ``lose``/``restore`` given, a session may also lose its session and get
it back (a "bounce"): in between its locks are suspended (not ``held``), and
after the revalidation each is either re-asserted (the node its own again,
with a new token) or lost to whoever took it; the same invariants hold.
"""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from harness import wait_until

from pulsar_state import (
    BaseMetadataStore,
    CoordinationService,
    NotFoundError,
    ResourceBusyError,
    ResourceLock,
)

T = 30  # seconds per blocking call

Node = tuple[str | None, int]  # (owner session, fencing token)


@dataclass
class Session:
    store: BaseMetadataStore
    coord: CoordinationService[str] = field(init=False)
    active: bool = True

    def __post_init__(self) -> None:
        self.coord = CoordinationService[str](self.store)


@dataclass
class Taken:
    lock: ResourceLock[str]
    session: Session

    @property
    def node(self) -> Node:
        return (self.session.store.session_id, self.lock.fencing_token)


def check_lock_ownership(
    *,
    new_store: Callable[[], BaseMetadataStore],
    operator: BaseMetadataStore,
    node_of: Callable[[str], Node | None],
    expire: Callable[[BaseMetadataStore], None],
    paths: list[str],
    steps: int,
    seed: int,
    sessions: int = 3,
    settle_s: float = 10.0,
    weights: tuple[int, int, int, int] = (6, 4, 1, 2),
    lose: Callable[[BaseMetadataStore], None] | None = None,
    restore: Callable[[BaseMetadataStore], None] | None = None,
    bounce_weight: int = 0,
) -> Counter[str]:
    """Run ``steps`` random steps; what happened, counted (for coverage checks)."""
    rng = random.Random(seed)
    live = [Session(new_store()) for _ in range(sessions)]
    retired: list[Session] = []
    taken: list[Taken] = []
    last_token = 0
    counts: Counter[str] = Counter()

    def check(step: int, what: str) -> None:
        nodes = {p: node_of(p) for p in paths}
        for p, node in nodes.items():
            believers = [t for t in taken if t.lock.path == p and t.lock.held and t.node == node]
            assert len(believers) <= 1, f"step {step} ({what}): {len(believers)} holders of {p}"

        def settled() -> bool:
            nodes = {p: node_of(p) for p in paths}
            for t in taken:
                if t.lock.held and nodes[t.lock.path] != t.node:
                    return False
            for p, node in nodes.items():
                if node is not None and not any(
                    t.lock.path == p and t.lock.held and t.node == node for t in taken
                ):
                    return False
            return True

        wait_until(
            settled,
            timeout_s=settle_s,
            interval_s=0.005,
            message=f"step {step} ({what}): exactly the nodes' owners believe they hold",
        )

    try:
        for step in range(steps):
            kinds = ["acquire", "release", "expire", "delete", "bounce"]
            kind = rng.choices(kinds, [*weights, bounce_weight if lose and restore else 0])[0]
            path = rng.choice(paths)
            before = node_of(path)
            if kind == "acquire":
                session = rng.choice(live)
                try:
                    lock = session.coord.acquire_lock(path, session.store.session_id).result(T)
                except ResourceBusyError:
                    assert before is not None, f"step {step}: busy, yet {path} was free"
                    counts["busy"] += 1
                else:
                    assert before is None, f"step {step}: acquired {path} held by {before}"
                    got = Taken(lock, session)
                    assert lock.fencing_token > last_token, f"step {step}: token went back"
                    last_token = lock.fencing_token
                    now = node_of(path)
                    assert now == got.node, f"step {step}: lock {got.node}, node {now}"
                    taken.append(got)
                    counts["acquire"] += 1
            elif kind == "release":
                candidates = [t for t in taken if t.lock.path == path]
                if not candidates:
                    continue
                t = rng.choice(candidates)
                again, was_lost = t.lock.released, t.lock.lost.done()
                t.lock.release().result(T)
                assert t.lock.released and not t.lock.held
                # lost only if its node was gone or another's when first released:
                # a release is no loss, nor is a second one
                lost = was_lost if again else before != t.node
                assert t.lock.lost.done() == lost, (
                    f"step {step}: released (again: {again}) with the node {before} "
                    f"(its own: {t.node}), lost {t.lock.lost.done()}"
                )
                after = node_of(path)
                if before == t.node:
                    assert after is None, f"step {step}: the owner's release left {after}"
                    counts["release"] += 1
                else:
                    assert after == before, (
                        f"step {step}: a stale release changed {path} from {before} to {after}"
                    )
                    counts["stale_release"] += 1
            elif kind == "expire":
                session = rng.choice(live)
                expire(session.store)
                session.active = False
                live.remove(session)
                retired.append(session)  # its stale locks may still be released
                live.append(Session(new_store()))
                counts["expire"] += 1
            elif kind == "bounce":
                assert lose is not None and restore is not None
                session = rng.choice(live)
                mine = [t for t in taken if t.session is session and t.lock.held]
                lose(session.store)
                check(step, "session lost")
                assert not any(t.lock.held for t in mine), f"step {step}: held while lost"
                if mine and rng.random() < 0.5:  # someone takes one meanwhile
                    other = rng.choice([s for s in live if s is not session] or live)
                    t = rng.choice(mine)
                    with contextlib.suppress(ResourceBusyError):
                        got = Taken(other.coord.acquire_lock(t.lock.path, "x").result(T), other)
                        assert got.lock.fencing_token > last_token
                        last_token = got.lock.fencing_token
                        taken.append(got)
                        counts["taken_while_lost"] += 1
                restore(session.store)
                for t in mine:
                    wait_until(
                        lambda t=t: t.lock.held or t.lock.lost.done(),  # type: ignore[misc]
                        timeout_s=settle_s,
                        message=f"step {step}: a lock of the bounced session revalidated",
                    )
                    counts["reasserted" if t.lock.held else "lost_to_another"] += 1
                    if t.lock.held:
                        assert t.lock.fencing_token > last_token, f"step {step}: token went back"
                        last_token = t.lock.fencing_token
                counts["bounce"] += 1
            else:
                if before is None:
                    continue
                with contextlib.suppress(NotFoundError):  # gone already: fine
                    operator.delete(path).result(T)
                counts["delete"] += 1
            check(step, kind)
    finally:
        for s in live + retired:
            s.coord.close()
    return counts
