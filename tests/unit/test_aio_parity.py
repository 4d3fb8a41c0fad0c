"""The asyncio surface stays in step with the blocking one (issue #18 item 7).

Every public method of PulsarMap, SharedStateManager, BaseMetadataStore and
CoordinationService must have a twin of the same name in ``pulsar_state.aio``
taking the same parameters (same names, kinds and defaults; the twin may add
optional ones). A method whose sync form returns a future must be a coroutine
function there. The exclusions below are the only exceptions, each with its reason.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from pulsar_state import aio
from pulsar_state.coordination import CoordinationService
from pulsar_state.core.manager import SharedStateManager
from pulsar_state.map.pulsar_map import PulsarMap
from pulsar_state.metadata.base import BaseMetadataStore

PAIRS: list[tuple[type[Any], type[Any]]] = [
    (PulsarMap, aio.AsyncPulsarMap),
    (SharedStateManager, aio.AsyncSharedStateManager),
    (BaseMetadataStore, aio.AsyncMetadataStore),
    (CoordinationService, aio.AsyncCoordinationService),
]

#: (sync class, method) that make no sense async, and why
EXCLUDED: dict[tuple[type[Any], str], str] = {
    # construction: build the manager with the sync builder, then wrap it
    (SharedStateManager, "builder"): "a static factory of the sync manager",
}


def public_methods(cls: type[Any]) -> dict[str, Any]:
    """Public functions of ``cls`` and its bases (properties and dunders aside)."""
    out: dict[str, Any] = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, staticmethod | classmethod):
            attr = attr.__func__
        if inspect.isfunction(attr):
            out[name] = attr
    return out


def _params(fn: Any) -> dict[str, inspect.Parameter]:
    params = dict(inspect.signature(fn).parameters)
    params.pop("self", None)
    params.pop("cls", None)
    return params


def mismatches(sync_cls: type[Any], async_cls: type[Any]) -> list[str]:
    problems: list[str] = []
    twins = public_methods(async_cls)
    for name, fn in sorted(public_methods(sync_cls).items()):
        if (sync_cls, name) in EXCLUDED:
            continue
        where = f"{async_cls.__name__}.{name}"
        twin = twins.get(name)
        if twin is None:
            problems.append(f"{where} is missing (twin of {sync_cls.__name__}.{name})")
            continue
        sync_params, async_params = _params(fn), _params(twin)
        for pname, p in sync_params.items():
            q = async_params.get(pname)
            if q is None:
                problems.append(f"{where} lacks parameter {pname!r}")
            elif (q.kind, q.default) != (p.kind, p.default):
                problems.append(
                    f"{where}: parameter {pname!r} is {q.kind.name}={q.default!r}, "
                    f"sync has {p.kind.name}={p.default!r}"
                )
        for pname in async_params.keys() - sync_params.keys():
            if async_params[pname].default is inspect.Parameter.empty:
                problems.append(f"{where} adds a required parameter {pname!r}")
        order = [n for n in async_params if n in sync_params]
        if order != list(sync_params):
            problems.append(f"{where}: parameters in another order {order} vs {list(sync_params)}")
        returns = str(inspect.signature(fn).return_annotation)
        if returns.startswith("Future") and not inspect.iscoroutinefunction(twin):
            problems.append(f"{where} must be a coroutine function (sync returns {returns})")
    return problems


@pytest.mark.parametrize(("sync_cls", "async_cls"), PAIRS, ids=lambda c: c.__name__)
def test_every_public_sync_method_has_a_compatible_async_twin(
    sync_cls: type[Any], async_cls: type[Any]
) -> None:
    assert mismatches(sync_cls, async_cls) == []


def test_exclusions_name_real_methods() -> None:
    for sync_cls, name in EXCLUDED:
        assert name in public_methods(sync_cls), f"stale exclusion {sync_cls.__name__}.{name}"


def test_the_check_catches_a_missing_twin_and_a_changed_parameter() -> None:
    class Sync:
        def get(self, key: str, latest: bool = False) -> Any: ...

        def put(self, key: str, value: int) -> Any: ...

    class Async:
        async def get(self, key: str, latest: bool = True) -> Any: ...

    assert mismatches(Sync, Async) == [
        "Async.get: parameter 'latest' is POSITIONAL_OR_KEYWORD=True, "
        "sync has POSITIONAL_OR_KEYWORD=False",
        "Async.put is missing (twin of Sync.put)",
    ]
