"""Every public method of the public API says what it returns and what it raises.

The rule (issue 18, item 8), checked on every class ``pulsar_state`` exports
(plus :class:`~pulsar_state.core.log.view.TopicView`), for each public method or
property it defines or inherits from a ``pulsar_state`` class:

- it has a docstring (an override without one inherits its base's, as
  :func:`inspect.getdoc` and ``help()`` show it);
- a method that returns a future (``Future[...]``, an awaitable) or is a
  coroutine has a ``Returns:`` section (what the future gives; not for a
  coroutine returning ``None``) and a ``Raises`` section (what the call raises
  at once and what the future or the await fails with), or says in so many
  words that it never raises;
- a method whose own body raises has a ``Raises`` section;
- a ``Raises`` section names at least one exception, every exception class
  it names exists (in :mod:`pulsar_state.errors` or the builtins), and it
  names each exception the method's own body raises by name.

So an empty or made-up section fails as well as a missing one.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import re
import textwrap
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

import pulsar_state
from pulsar_state import errors
from pulsar_state.core.log.view import TopicView
from pulsar_state.metadata import tree as metadata_tree

_EXTRA: list[type] = [TopicView]


def _classes() -> list[type]:
    out: list[type] = []
    for name in pulsar_state.__all__:
        obj = getattr(pulsar_state, name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            out.append(obj)
    return out + _EXTRA


def _members(cls: type) -> Iterator[tuple[str, type, Any]]:
    """(name, defining class, attribute) of each public pulsar_state member of ``cls``."""
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or not owner.__module__.startswith("pulsar_state"):
            continue
        attr = vars(owner)[name]
        if isinstance(attr, property):
            yield name, owner, attr.fget
        elif isinstance(attr, staticmethod | classmethod):
            yield name, owner, attr.__func__
        elif inspect.isfunction(attr):
            yield name, owner, attr


def _doc(cls: type, name: str, fn: Any) -> str:
    """The docstring ``help()`` shows: the method's own, else the nearest base's."""
    return inspect.getdoc(getattr(cls, name)) or inspect.getdoc(fn) or ""


def _returns_future(fn: Any) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    annotation = str(fn.__annotations__.get("return", ""))
    return bool(re.match(r"^(Future|Awaitable|Coroutine)\b", annotation)) or " Future[" in (
        " " + annotation
    )


def _own_raises(fn: Any) -> set[str]:
    """Names of the exceptions ``fn``'s own body raises (not its nested functions)."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return set()
    tree = ast.parse(source)
    func = tree.body[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.Raise) and child.exc is not None:
                exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(exc, ast.Name) and exc.id[:1].isupper():
                    found.add(exc.id)
                else:
                    found.add("")  # re-raises a caught error: a section, any name
            visit(child)

    visit(func)
    return found


def _section(doc: str, title: str) -> str | None:
    """The text of the ``title`` section (``Raises:`` or ``Raises (...):``), or None."""
    match = re.search(rf"^{title}\b[^\n]*:\s*$", doc, re.MULTILINE)
    if match is None:
        return None
    rest = doc[match.end() :]
    end = re.search(r"^\S", rest, re.MULTILINE)  # the next unindented line ends it
    return rest if end is None else rest[: end.start()]


def _known_exception(name: str) -> bool:
    candidate = (
        getattr(errors, name, None)
        or getattr(metadata_tree, name, None)  # InvalidPathError (a ValueError)
        or getattr(builtins, name, None)
    )
    return inspect.isclass(candidate) and issubclass(candidate, BaseException)


def _problems(cls: type, name: str, fn: Any) -> list[str]:
    doc = _doc(cls, name, fn)
    if not doc:
        return ["no docstring"]
    problems: list[str] = []
    raised = _own_raises(fn)
    future = _returns_future(fn)
    returns_none = str(fn.__annotations__.get("return")) == "None"  # a coroutine of None
    if future and not returns_none and _section(doc, "Returns") is None:
        problems.append("returns a future but has no 'Returns:' section")
    raises = _section(doc, "Raises")
    if raises is None:
        if raised or (future and "never raises" not in doc.lower()):
            problems.append("has no 'Raises:' section")
        return problems
    named = set(re.findall(r"\b([A-Z]\w*(?:Error|Exception|Exit))\b", raises))
    if not named:
        problems.append("its 'Raises:' section names no exception")
    problems += [
        f"'Raises:' names {n}, which is no exception"
        for n in sorted(named)
        if not _known_exception(n)
    ]
    problems += [
        f"raises {n} but its 'Raises:' does not name it" for n in sorted(raised - named - {""})
    ]
    return problems


def _all_members() -> list[tuple[type, str, Any]]:
    seen: set[tuple[type, str]] = set()
    out: list[tuple[type, str, Any]] = []
    for cls in _classes():
        for name, _owner, fn in _members(cls):
            if (cls, name) not in seen:
                seen.add((cls, name))
                out.append((cls, name, fn))
    return out


def test_the_walk_covers_the_public_api() -> None:
    names = {f"{cls.__name__}.{name}" for cls, name, _ in _all_members()}
    for expected in (
        "PulsarMap.get",
        "PulsarMap.transact",
        "AsyncPulsarMap.update",
        "SharedStateManager.write",
        "AsyncSharedStateManager.read",
        "MetadataStore.put",
        "MemoryMetadataStore.delete",
        "MetadataCache.read_modify_update",
        "CoordinationService.acquire_lock",
        "ResourceLock.release",
        "AsyncCoordinationService.become_leader",
        "TopicView.catch_up",
    ):
        assert expected in names
    assert len(names) > 150


def test_the_rule_catches_a_missing_or_made_up_section() -> None:
    class Sample:
        def bare(self) -> Future[int]:
            """A future with no sections."""
            return Future()

        def invented(self) -> Future[int]:
            """A future.

            Returns:
                The number.

            Raises:
                NoSuchThingError: never.
            """
            return Future()

        def unnamed(self, x: int) -> int:
            """Checks x.

            Raises:
                Nothing much.
            """
            if x < 0:
                raise ValueError(x)
            return x

        def good(self, x: int) -> Future[int]:
            """A future of ``x``.

            Returns:
                A future of ``x``.

            Raises:
                ValueError: at the call, for a negative ``x``.
                StateClosedError: through the future, once closed.
            """
            if x < 0:
                raise ValueError(x)
            return Future()

    problems = {
        n: _problems(Sample, n, vars(Sample)[n]) for n in ("bare", "invented", "unnamed", "good")
    }
    assert problems["bare"] == [
        "returns a future but has no 'Returns:' section",
        "has no 'Raises:' section",
    ]
    assert problems["invented"] == ["'Raises:' names NoSuchThingError, which is no exception"]
    assert "its 'Raises:' section names no exception" in problems["unnamed"]
    assert "raises ValueError but its 'Raises:' does not name it" in problems["unnamed"]
    assert problems["good"] == []


@pytest.mark.parametrize(
    ("cls", "name", "fn"),
    _all_members(),
    ids=[f"{cls.__name__}.{name}" for cls, name, _ in _all_members()],
)
def test_public_method_documents_returns_and_raises(cls: type, name: str, fn: Any) -> None:
    problems = _problems(cls, name, fn)
    assert not problems, f"{cls.__name__}.{name} ({fn.__module__}): " + "; ".join(problems)
