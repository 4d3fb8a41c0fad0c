"""Opening a state topic: protect it and its companions, then find where to start.

A manager opens in two steps before it tails the topic:

1. :func:`prepare_topics`, through the admin API: create the topic if missing,
   protect it (infinite retention, no inactive deletion, a compaction threshold
   for a keyed topic) and its snapshot topic, learn the topic's incarnation
   (snapshots and checkpoints of another incarnation are not loaded), and reap
   the subscriptions that dead managers left behind.
2. :func:`find_start`: the newest snapshot, else the newest checkpoint (an
   accelerator, :mod:`pulsar_state.core.accelerator`), else the initializer's
   empty state from the start of the topic.
3. :func:`tail`: follow the topic from there until caught up. From the
   compacted view, unless a checkpoint was loaded (its tail is read raw: a
   compacted one hides deletes). A compacted view can also hide a key's true
   value: when a fenced writer's late write of the key (stale, skipped by
   every reader) is the key's last message at compaction time, compaction
   drops every earlier value of the key, so the view shows the key absent.
   A bootstrap that meets an unrepaired stale key in the compacted view
   therefore starts over on the raw history, where the earlier value is
   (issue #25, defect 5: otherwise the new map's repair deletes the key for
   everyone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import pulsar

from pulsar_state.cluster.admin import PulsarAdmin
from pulsar_state.config import StateConfig
from pulsar_state.core.accelerator import Checkpoints, Loaded
from pulsar_state.core.log.tailer import Tailer
from pulsar_state.core.op_codec import OpCodec
from pulsar_state.core.snapshot import Snapshotter
from pulsar_state.errors import PulsarStateError, StateTopicError
from pulsar_state.position import Position
from pulsar_state.topic_names import snapshot_topic

__all__ = ["Start", "find_start", "prepare_topics", "tail"]

log = logging.getLogger(__name__)

S = TypeVar("S")
Op = TypeVar("Op")

#: the snapshot topic's compaction threshold (one key: any backlog compacts)
SNAPSHOT_COMPACTION_BYTES = 1024 * 1024


def prepare_topics(
    admin: PulsarAdmin,
    topic: str,
    config: StateConfig,
    *,
    compactable: bool,
    snapshots: bool,
) -> str | None:
    """Create and protect ``topic`` (and its snapshot topic when ``snapshots``),
    reap stale subscriptions, and return the topic's incarnation."""
    admin.ensure_topic(topic)
    if config.ensure_retention:
        admin.protect(
            topic,
            compaction_threshold_bytes=config.compaction_threshold_bytes if compactable else None,
        )
    if snapshots:
        admin.ensure_topic(snapshot_topic(topic))
        if config.ensure_retention:
            admin.protect(
                snapshot_topic(topic), compaction_threshold_bytes=SNAPSHOT_COMPACTION_BYTES
            )
    # snapshots and checkpoints are bound to this incarnation of the topic
    incarnation = admin.incarnation(topic)
    try:
        admin.reap_subscriptions(topic, config.subscription_prefix)
    except PulsarStateError:
        log.debug("could not reap stale subscriptions on %s", topic, exc_info=True)
    return incarnation


@dataclass(frozen=True)
class Start(Generic[S]):
    """Where a manager starts tailing, and the state it starts from."""

    state: S
    #: the position the state includes (None: from the topic's start)
    position: Position | None
    epoch: int
    #: "checkpoint", "snapshot" or "topic" (from the start)
    source: Literal["checkpoint", "snapshot", "topic"]
    #: the checkpoint it came from, if one
    loaded: Loaded[S] | None


def find_start(
    initializer: Callable[[], S],
    snapshotter: Snapshotter[S] | None,
    checkpointer: Checkpoints[S] | None,
) -> Start[S]:
    """The newest snapshot, else the newest usable checkpoint, else the initializer's state."""
    snapshot = snapshotter.load() if snapshotter is not None else None
    if snapshot is not None:
        return Start(snapshot.state, snapshot.position, snapshot.epoch, "snapshot", None)
    loaded = checkpointer.load() if checkpointer is not None else None
    if loaded is not None:
        return Start(loaded.state, loaded.position, loaded.epoch, "checkpoint", loaded)
    return Start(initializer(), None, 0, "topic", None)


def tail(
    *,
    client: pulsar.Client,
    topic: str,
    codec: OpCodec[Op],
    applier: Callable[[S, Op], Any],
    config: StateConfig,
    start: Start[S],
    start_over: Callable[[], Start[S]],
) -> Tailer[S, Op]:
    """A started tailer on ``topic`` from ``start``, caught up with the topic.

    ``start_over`` makes a fresh start (not a checkpoint) for a second pass on
    the raw history, when the compacted view showed an unrepaired stale key.
    """
    read_compacted = False if start.loaded is not None else config.read_compacted
    tailer = _tail_from(client, topic, codec, applier, config, start, read_compacted)
    if not (read_compacted and tailer.stale_keys):
        return tailer
    keys = sorted(tailer.stale_keys)
    tailer.close()
    log.warning(
        "%s: the compacted view ends keys %s with a fenced writer's stale write, and may "
        "have dropped their values; reading the topic's whole history instead",
        topic,
        ", ".join(keys[:5]) + (" ..." if len(keys) > 5 else ""),
    )
    return _tail_from(client, topic, codec, applier, config, start_over(), read_compacted=False)


def _tail_from(  # noqa: PLR0917 - the private half of tail()
    client: pulsar.Client,
    topic: str,
    codec: OpCodec[Op],
    applier: Callable[[S, Op], Any],
    config: StateConfig,
    start: Start[S],
    read_compacted: bool,
) -> Tailer[S, Op]:
    try:
        tailer: Tailer[S, Op] = Tailer(
            client=client,
            topic=topic,
            codec=codec,
            applier=applier,
            state=start.state,
            config=config,
            start=start.position,
            start_epoch=start.epoch,
            read_compacted=read_compacted,
        )
    except pulsar.PulsarException as exc:
        raise StateTopicError(f"cannot read {topic}: {exc}") from exc
    if start.loaded is not None:
        tailer.stale_keys.update(start.loaded.stale_keys)
    tailer.start()
    try:
        tailer.catch_up(config.operation_timeout_s * 4)
    except BaseException:
        tailer.close()
        raise
    return tailer
