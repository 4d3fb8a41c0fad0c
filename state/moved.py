"""Import paths that moved when ``state/`` became subpackages (0.2): kept for one release.

``import pulsar_state.pulsar_map`` (or ``from pulsar_state.metadata_state import
InvalidPathError``) still works and gives the module at its new path, the same
object, with a :class:`DeprecationWarning` that names the new path. The names
exported by ``pulsar_state`` itself did not move; import from there where you
can. The old paths go in 0.3.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED", "install"]

#: old module path -> new module path
MOVED = {
    "pulsar_state.manager": "pulsar_state.core.manager",
    "pulsar_state.callback_thread": "pulsar_state.core.callback_thread",
    "pulsar_state.futures": "pulsar_state.core.futures",
    "pulsar_state.snapshot": "pulsar_state.core.snapshot",
    "pulsar_state.op_codec": "pulsar_state.core.op_codec",
    "pulsar_state.topic_format": "pulsar_state.core.log.format",
    "pulsar_state.replay": "pulsar_state.core.log.replay",
    "pulsar_state.tailer": "pulsar_state.core.log.tailer",
    "pulsar_state.topic_view": "pulsar_state.core.log.view",
    "pulsar_state.pulsar_map": "pulsar_state.map.pulsar_map",
    "pulsar_state.map_op": "pulsar_state.map.op",
    "pulsar_state.map_watch": "pulsar_state.map.watch",
    "pulsar_state.checkpoint": "pulsar_state.map.checkpoint",
    "pulsar_state.checkpoint_format": "pulsar_state.map.checkpoint.format",
    "pulsar_state.metadata_state": "pulsar_state.metadata.tree",
    "pulsar_state.metadata_base": "pulsar_state.metadata.base",
    "pulsar_state.metadata_store": "pulsar_state.metadata.store",
    "pulsar_state.memory_store": "pulsar_state.metadata.memory",
    "pulsar_state.metadata_cache": "pulsar_state.metadata.cache",
    "pulsar_state.aio_metadata": "pulsar_state.aio.metadata",
    "pulsar_state.admin": "pulsar_state.cluster.admin",
    "pulsar_state.admin_endpoint": "pulsar_state.cluster.endpoint",
    "pulsar_state.cluster_auth": "pulsar_state.cluster.auth",
    "pulsar_state.function_tls": "pulsar_state.runtime.tls",
    "pulsar_state.function_secrets": "pulsar_state.runtime.secrets",
    "pulsar_state.instance_metrics": "pulsar_state.runtime.instance_metrics",
}


class _MovedLoader(importlib.abc.Loader):
    """Loads an old path as the module at its new path (the same object)."""

    def __init__(self, new: str) -> None:
        self._new = new
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self._new}; the old path goes in 0.3",
            DeprecationWarning,
            stacklevel=_caller_level(),
        )
        module = importlib.import_module(self._new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system set the old path's spec on the module: give its own back
        module.__spec__ = self._spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(new))


def _caller_level() -> int:
    """The ``stacklevel`` that points the warning at the importing code, past
    the import system's frames (so the default filters show it there)."""
    frame = sys._getframe(2)
    level = 3
    while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (``pulsar_state`` does it on import)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
