"""The asyncio surface: the same core, awaited.

Each call starts the same future-returning operation as the blocking surface
and awaits it on the running loop (:func:`asyncio.wrap_future` completes the
asyncio future from the core's threads through ``call_soon_threadsafe``). The
exceptions are the same classes.

    async with AsyncPulsarMap(client, topic, admin_url=...) as m:
        await m.put("k", 1)
        assert await m.get("k", latest=True) == 1

Opening (bootstrap) blocks while it catches up, so ``open()`` runs it in a
worker thread.

Methods the blocking surface has without a future (listeners, ``close``,
``check_process``, ``fencing_token``) are plain or ``async`` twins of the same
name; a unit test (``tests/unit/test_aio_parity.py``) fails when a public sync
method has no twin with the same parameters here.

Cancelling a task that awaits a write cancels the core's future: a write still
queued is then never written; one the writer has taken up goes on and may
land (it cannot be taken back). Either way no other write is disturbed: the
core completes futures through :mod:`pulsar_state.core.futures`, which skips
cancelled ones.
"""

from pulsar_state.aio.coordination import AsyncCoordinationService
from pulsar_state.aio.manager import AsyncSharedStateManager
from pulsar_state.aio.map import AsyncMapWatch, AsyncPulsarMap
from pulsar_state.aio.metadata import AsyncMetadataStore
from pulsar_state.core.futures import wrap

__all__ = [
    "AsyncCoordinationService",
    "AsyncMapWatch",
    "AsyncMetadataStore",
    "AsyncPulsarMap",
    "AsyncSharedStateManager",
    "wrap",
]
