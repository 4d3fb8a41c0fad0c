"""A stress check of MetadataCache freshness, shared by the memory and Pulsar tests.

Writer threads update values through their own caches (read-modify-update),
directly on a store, and delete them, while reader threads read values,
children lists and existence through every cache. Once the writers are done
and notifications are through (a bounded wait), every cache must return what
the store holds: each value, whether each path exists, and the children of
the paths' parent (the paths are its only children).
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
from collections.abc import Callable
from typing import Any

from harness import wait_until

from pulsar_state import BaseMetadataStore, MetadataCache, NotFoundError
from pulsar_state.metadata.tree import parent_of

T = 60  # seconds per blocking call


def check_caches_converge(
    *,
    stores: list[BaseMetadataStore],
    stored_value: Callable[[str], Any],
    paths: list[str],
    writers: int,
    ops_per_writer: int,
    readers: int,
    seed: int,
    caches_per_store: int = 2,
    settle_s: float = 10.0,
) -> int:
    """Run one round; how many reads the readers made."""
    parents = {parent_of(p) for p in paths}
    assert len(parents) == 1, "the paths share one parent"
    parent = parents.pop()
    assert parent is not None
    caches: list[MetadataCache[dict[str, int]]] = [
        MetadataCache(s) for s in stores for _ in range(caches_per_store)
    ]
    done = threading.Event()
    errors: list[BaseException] = []
    reads = [0] * readers

    def write(n: int) -> None:
        rng = random.Random(seed * 1000 + n)
        cache = caches[n % len(caches)]
        store = stores[n % len(stores)]
        try:
            for i in range(ops_per_writer):
                path = rng.choice(paths)
                roll = rng.random()
                if roll < 0.1:
                    with contextlib.suppress(NotFoundError):
                        store.delete(path).result(T)
                elif roll < 0.6:
                    cache.read_modify_update_or_create(
                        path, lambda v: {"n": (v or {"n": 0})["n"] + 1, "by": n}
                    ).result(T)
                else:
                    body = json.dumps({"n": rng.randrange(1_000_000), "by": n, "i": i})
                    store.put(path, body.encode()).result(T)
        except BaseException as exc:
            errors.append(exc)

    def read(n: int) -> None:
        rng = random.Random(seed * 1000 + 500 + n)
        try:
            while not done.is_set():
                cache, path, kind = rng.choice(caches), rng.choice(paths), rng.random()
                if kind < 0.6:
                    cache.get(path).result(T)
                elif kind < 0.8:
                    cache.exists(path).result(T)
                else:
                    cache.get_children(parent).result(T)
                reads[n] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(n,)) for n in range(readers)]
    wthreads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    try:
        for t in threads + wthreads:
            t.start()
        for t in wthreads:
            t.join(timeout=T * ops_per_writer)
            assert not t.is_alive(), "a writer finished its operations"
        done.set()
        for t in threads:
            t.join(timeout=T)
            assert not t.is_alive(), "a reader stopped"
        assert not errors, errors

        def stale() -> list[tuple[int, str, Any, Any]]:
            found = []
            children = []
            for p in paths:
                want = stored_value(p)
                if want is not None:
                    children.append(p.rsplit("/", 1)[1])
                for i, c in enumerate(caches):
                    got = c.get(p).result(T)
                    if got != want:
                        found.append((i, p, got, want))
                    there = c.exists(p).result(T)
                    if there != (want is not None):
                        found.append((i, f"exists {p}", there, want is not None))
            for i, c in enumerate(caches):
                listed = c.get_children(parent).result(T)
                if listed != sorted(children):
                    found.append((i, f"children of {parent}", listed, sorted(children)))
            return found

        wait_until(
            lambda: not stale(),
            timeout_s=settle_s,
            interval_s=0.01,
            message="every cache returns the stored value",
        )
        return sum(reads)
    finally:
        done.set()
        for c in caches:
            c.close()
