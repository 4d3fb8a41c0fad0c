"""The reads of a :class:`~pulsar_state.map.pulsar_map.PulsarMap`: local, or latest.

Every read runs a function on the map's state under the state lock, through
the manager (``read(fn, latest)``): local by default, after catching up with
the topic with ``latest=True`` (a linearizable read). Values handed out are
copies (:func:`~pulsar_state.map.op.copy_value`): changing one never changes
the map. The map's writes are in :mod:`pulsar_state.map.pulsar_map`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pulsar_state.map.op import MapOp, copy_value

if TYPE_CHECKING:
    from pulsar_state.core.manager import SharedStateManager

__all__ = ["MapReads"]

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")


class MapReads(Generic[K, V]):
    """The map's reads over ``self.manager`` (set by the map)."""

    manager: SharedStateManager[dict[K, V], MapOp[K, V]]

    def _read(self, fn: Callable[[dict[K, V]], R], latest: bool) -> Future[R]:
        return self.manager.read(fn, latest)

    def get(self, key: K, latest: bool = False) -> Future[V | None]:
        """The value of ``key``; with ``latest``, after catching up with the topic.

        Returns:
            A future of a copy of the value, or ``None`` if ``key`` is absent.

        Raises:
            ForkedProcessError: at the call (see *Errors* in the module docstring).
            StateClosedError, OperationTimeoutError: through the future (the
                latter only with ``latest=True``).
        """
        return self._read(lambda s: copy_value(s.get(key)), latest)

    def get_or_default(self, key: K, default: V, latest: bool = False) -> Future[V]:
        """The value of ``key``, or ``default`` if it is absent.

        Returns:
            A future of a copy of the value, or of ``default``.

        Raises:
            ForkedProcessError: at the call (see *Errors* in the module docstring).
            StateClosedError, OperationTimeoutError: through the future (the
                latter only with ``latest=True``).
        """
        return self._read(lambda s: copy_value(s[key]) if key in s else default, latest)

    def contains(self, key: K, latest: bool = False) -> Future[bool]:
        """Whether ``key`` is in the map.

        Returns:
            A future of ``True`` if ``key`` is present.

        Raises:
            ForkedProcessError: at the call (see *Errors* in the module docstring).
            StateClosedError, OperationTimeoutError: through the future (the
                latter only with ``latest=True``).
        """
        return self._read(lambda s: key in s, latest)

    def size(self, latest: bool = False) -> Future[int]:
        """The number of keys in the map.

        Returns:
            A future of the key count.

        Raises:
            ForkedProcessError: at the call (see *Errors* in the module docstring).
            StateClosedError, OperationTimeoutError: through the future (the
                latter only with ``latest=True``).
        """
        return self._read(len, latest)

    def list_keys(self, latest: bool = False) -> Future[list[K]]:
        """The keys of the map.

        Returns:
            A future of a new list of the keys (in no particular order).

        Raises:
            ForkedProcessError: at the call (see *Errors* in the module docstring).
            StateClosedError, OperationTimeoutError: through the future (the
                latter only with ``latest=True``).
        """
        return self._read(list, latest)

    def items(self, latest: bool = False) -> Future[dict[K, V]]:
        """A copy of the whole map.

        Returns:
            A future of a new dict holding copies of every value.

        Raises:
            ForkedProcessError: at the call (see *Errors* in the module docstring).
            StateClosedError, OperationTimeoutError: through the future (the
                latter only with ``latest=True``).
        """
        return self._read(lambda s: {k: copy_value(v) for k, v in s.items()}, latest)

    def scan(
        self,
        filter: Callable[[K, V], bool],
        processor: Callable[[K, V], Any],
        latest: bool = False,
    ) -> Future[int]:
        """Call ``processor(k, v)`` for each entry ``filter`` accepts; count them.

        Runs under the state lock on a consistent view; keep both functions quick.

        Returns:
            A future of how many entries ``filter`` accepted.

        Raises:
            Exception: through the future, whatever ``filter`` or ``processor``
                raises, unchanged (the scan stops there).
            ForkedProcessError: at the call (see *Errors* in the module docstring).
            StateClosedError, OperationTimeoutError: through the future (the
                latter only with ``latest=True``).
        """

        def run(state: dict[K, V]) -> int:
            count = 0
            for k, v in state.items():
                if filter(k, v):
                    processor(k, copy_value(v))
                    count += 1
            return count

        return self._read(run, latest)
