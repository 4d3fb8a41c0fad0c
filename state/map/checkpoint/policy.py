"""When and how a map's holder writes checkpoints: :class:`CheckpointPolicy`."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from pulsar_state.errors import (
    ConfigurationError,
)

__all__ = ["CheckpointPolicy", "arrow_available", "resolve_policy"]

_COMPRESSIONS = (None, "lz4", "zstd")


def arrow_available() -> bool:
    """Whether pyarrow is installed here (checkpoints need it).

    Found, not imported: importing it costs about half a second and tens of
    MB, which a process pays only once it reads or writes a checkpoint. A
    broken install then makes a bad checkpoint (replayed, counted) or a failed
    one (logged), never a failed write.
    """
    return importlib.util.find_spec("pyarrow") is not None


@dataclass(frozen=True, kw_only=True)
class CheckpointPolicy:
    """When and how a map's holder writes checkpoints.

    Attributes:
        every_ops: write one once this many ops were applied since the last
            (the longest tail a bootstrap then replays).
        chunk_bytes: keys and values per chunk (one message each); at most
            the map's ``max_write_bytes``.
        compression: Arrow IPC buffer compression: ``"lz4"``, ``"zstd"`` or
            ``None``.
        min_keys: maps smaller than this are not checkpointed (their topic
            is read fast anyway).
        min_interval_s: at least this long between two automatic checkpoints
            (or after a failed one), whatever the ops: a checkpoint costs
            serializing the whole map.
    """

    every_ops: int = 100_000
    chunk_bytes: int = 2 * 1024 * 1024
    compression: str | None = "lz4"
    min_keys: int = 1000
    min_interval_s: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.every_ops, int) or self.every_ops < 1:
            raise ConfigurationError(f"every_ops must be an int >= 1, got {self.every_ops!r}")
        if not isinstance(self.chunk_bytes, int) or self.chunk_bytes < 1024:
            raise ConfigurationError(
                f"chunk_bytes must be an int >= 1024, got {self.chunk_bytes!r}"
            )
        if self.compression not in _COMPRESSIONS:
            raise ConfigurationError(
                f"compression must be one of {_COMPRESSIONS}, got {self.compression!r}"
            )
        if not isinstance(self.min_keys, int) or self.min_keys < 0:
            raise ConfigurationError(f"min_keys must be an int >= 0, got {self.min_keys!r}")
        if not isinstance(self.min_interval_s, int | float) or self.min_interval_s < 0:
            raise ConfigurationError(
                f"min_interval_s must be a number >= 0, got {self.min_interval_s!r}"
            )


def resolve_policy(
    checkpoints: CheckpointPolicy | bool | None, max_write_bytes: int, *, protected: bool
) -> CheckpointPolicy | None:
    """``None``: checkpoints when pyarrow is installed and the map protects its
    topics (an admin URL, ``ensure_retention``: the checkpoint topic then gets
    zero retention, so old checkpoints go); ``True``: insist. The default
    policy's chunks fit the map's ``max_write_bytes``."""
    if isinstance(checkpoints, CheckpointPolicy):
        return checkpoints
    default = CheckpointPolicy(chunk_bytes=min(CheckpointPolicy.chunk_bytes, max_write_bytes))
    if checkpoints is None:
        return default if protected and arrow_available() else None
    if checkpoints is True:
        return default
    if checkpoints is False:
        return None
    raise TypeError(
        f"checkpoints must be a CheckpointPolicy, True, False or None, got {checkpoints!r}"
    )
