"""The asyncio map's new twins against the real broker (issue #18 item 7):
contains, size, transact, watch with a coroutine callback, and the manager's
write(blind=...) and read(timeout_s=...)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pulsar
from harness import unique_topic

from pulsar_state.aio import AsyncPulsarMap, AsyncSharedStateManager
from pulsar_state.map.pulsar_map import MapOp
from pulsar_state.map.watch import MapChange
from pulsar_state.position import Position


def test_async_map_contains_size_transact_and_watch(client: pulsar.Client, admin_url: str) -> None:
    topic = unique_topic("aio-map")

    async def main() -> None:
        async with AsyncPulsarMap[str, Any](client, topic, admin_url=admin_url) as m:
            assert not await m.contains("a", latest=True)
            assert await m.size() == 0
            seen: list[tuple[str, Any, Any]] = []
            loops: set[int] = set()
            arrived = asyncio.Event()

            async def on_change(change: MapChange[str, Any]) -> None:
                loops.add(id(asyncio.get_running_loop()))
                await asyncio.sleep(0)  # a real coroutine, awaited in order
                seen.append((change.key, change.value, change.old_value))
                if len(seen) == 4:
                    arrived.set()

            async def failing(change: MapChange[str, Any]) -> None:
                raise RuntimeError("async callback error")

            watch = await m.watch("", on_change, prefix=True)
            bad = await m.watch("a", failing)
            await m.put("a", 1)

            def move(state: Mapping[str, Any]) -> list[MapOp[str, Any]]:
                return [MapOp.put("b", state["a"] + 1), MapOp.delete("a")]

            position = await m.transact(move)
            assert isinstance(position, Position)
            assert await m.transact(lambda s: [MapOp.put("c", len(s))], reader=dict) == {
                "b": 2,
                "c": 1,
            }
            assert await m.contains("b") and not await m.contains("a")
            assert await m.size(latest=True) == 2
            await asyncio.wait_for(arrived.wait(), timeout=30)
            assert seen == [("a", 1, None), ("b", 2, None), ("a", None, 1), ("c", 1, None)]
            assert loops == {id(asyncio.get_running_loop())}
            assert await watch.stop(5.0) and not watch.running
            for _ in range(300):  # at most 30 s for the other watch's two changes
                if bad.errors >= 2:
                    break
                await asyncio.sleep(0.1)
            assert bad.errors == 2 and bad.delivered == 0  # put a, delete a: counted, not fatal
            await bad.stop(5.0)

            manager = AsyncSharedStateManager(m.sync.manager)
            written = await manager.write(lambda _s: [MapOp("d", 4, b"4")], blind=True)
            assert isinstance(written, Position)
            assert await manager.read(lambda s: s.get("d"), at_least=written, timeout_s=5.0) == 4

    asyncio.run(main())
