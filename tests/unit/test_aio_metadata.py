"""The asyncio metadata twins added with the PIP-45 gaps (issue #18 item 7), on
the in-memory reference store: sequential put, delete_recursive, guarded
delete, fencing_token, prefix and session listeners, close."""

from __future__ import annotations

import asyncio
import threading

import pytest

from pulsar_state.aio import AsyncCoordinationService, AsyncMetadataStore
from pulsar_state.coordination import CoordinationService
from pulsar_state.errors import BadVersionError
from pulsar_state.metadata.memory import MemoryMetadataStore
from pulsar_state.metadata.tree import Notification


def test_async_metadata_twins() -> None:
    store = AsyncMetadataStore(MemoryMetadataStore())
    coord = AsyncCoordinationService[str](CoordinationService(store.sync))
    under: list[str] = []
    seen = threading.Event()

    def on_note(note: Notification) -> None:
        under.append(note.path)
        if note.path == "/q/item-0000000002":
            seen.set()

    async def main() -> None:
        store.register_listener(on_note, "/q")
        first = await store.put("/q/item-", b"a", sequential=True)
        second = await store.put("/q/item-", b"b", -1, sequential=True)
        assert (first.path, second.path) == ("/q/item-0000000001", "/q/item-0000000002")
        await store.put("/other", b"x")
        got = await store.get("/q/item-0000000001", latest=True)
        assert got is not None and got.value == b"a"
        token = store.fencing_token("/q/item-0000000002")
        assert token is not None and token == second.token
        with pytest.raises(BadVersionError):
            await store.delete("/q/item-0000000001", expected_owner="someone-else")
        await store.delete("/q/item-0000000001", expected_token=first.token)
        assert await store.delete_recursive("/q") == ["/q/item-0000000002"]
        assert not await store.exists("/q")
        # notifications come on the store's dispatcher thread: wait for the one
        # awaited before unregistering (which drops what is not dispatched yet)
        assert await asyncio.to_thread(seen.wait, 5), "the prefix listener saw the node"
        store.unregister_listener(on_note)
        store.register_session_listener(print)
        store.unregister_session_listener(print)
        await coord.close()
        await store.close()

    asyncio.run(main())
    assert under and all(p.startswith("/q") for p in under), under
