"""Unit-testing code that takes a map, without a broker: ``MemoryPulsarMap``.

python -m pytest examples/test_with_memory_map.py
"""

from __future__ import annotations

from pulsar_state import MemoryPulsarMap, PulsarMap


def enabled_features(flags: PulsarMap[str, bool]) -> list[str]:
    """The code under test: the features switched on."""
    return sorted(k for k, on in flags.items(latest=True).result(30).items() if on)


def test_enabled_features() -> None:
    flags = MemoryPulsarMap[str, bool]()
    flags.put_all({"checkout-v2": True, "dark-mode": False}).result()
    assert enabled_features(flags) == ["checkout-v2"]
    flags.update("dark-mode", lambda on: not on).result()
    assert enabled_features(flags) == ["checkout-v2", "dark-mode"]
