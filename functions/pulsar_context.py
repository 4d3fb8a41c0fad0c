"""Pulsar's own Context state calls, backed by the shared state, effectively once.

A Python function written for Pulsar calls ``context.incr_counter``,
``get_counter``, ``del_counter``, ``put_state`` and ``get_state``. On a
standalone or any cluster without BookKeeper's table service those calls do
nothing (``NullStateContext``). Deployed through :class:`SharedStateFunction`
the same, unchanged class gets the stateful kit's state
(:mod:`~pulsar_state.functions.stateful`): shared by every instance, each
message's state calls written together with its "processed" marker in one
atomic write, so a redelivered message changes nothing::

    pulsar-admin functions create --py word_count.zip \\
        --classname pulsar_state.functions.pulsar_context.SharedStateFunction \\
        --user-config '{"userClass": "word_count.WordCountFunction", "adminUrl": "..."}' \\
        --retain-ordering --inputs ... --parallelism 2

(``word_count.zip`` is ``build_function_package`` of the user's unchanged
file: this project and its dependencies ride along.) Or, for a user who may
edit the file, the :func:`shared_state` decorator on the class does the same.

The semantics are those of Pulsar's Python ``ContextImpl``:

* ``incr_counter(key, amount)``: ``amount`` is an int; ``get_counter(key)`` is
  the int, or ``None`` for a key never counted;
* ``put_state(key, value)``: ``value`` is ``bytes`` or ``str``; ``get_state(key)``
  gives ``bytes`` or ``None``;
* ``del_counter(key)`` deletes the key, counter or value;
* one key holds one thing: ``put_state`` on a counter's key replaces the
  counter, ``incr_counter`` on a value's key starts a counter there.

Unlike BookKeeper's table service the calls of one message are atomic and
exactly once, and a read sees this message's own earlier calls. What the
user's ``process`` returns is the kit's output: committed with the state, and
the same value sent again when the message is redelivered (see
:mod:`~pulsar_state.functions.stateful`). ``publish`` and every other Context
call go to the runtime's context unchanged (at least once). The requirements
are the kit's: ``retainOrdering: true``; ``stateTopic`` and ``adminUrl`` in user
config as for any stateful function.
``pulsar-state functions querystate`` and ``pulsar-state serve`` read the keys
back as Pulsar's ``querystate`` does.
"""

from __future__ import annotations

import importlib
from typing import Any

from pulsar_state.errors import ConfigurationError
from pulsar_state.functions.stateful import FunctionState, StatefulFunction

__all__ = ["PulsarStateContext", "SharedStateFunction", "shared_state"]

#: the user-config key naming the user's ``pulsar.Function`` class
USER_CLASS = "userClass"


class PulsarStateContext:
    """The runtime's context for one message, with its state calls on the kit's state."""

    def __init__(self, context: Any, state: FunctionState) -> None:
        self._context = context
        self._state = state

    def incr_counter(self, key: str, amount: int) -> None:
        self._state.incr_counter(key, amount)
        self._state.del_state(key)  # one key, one thing

    def get_counter(self, key: str) -> int | None:
        return self._state.find_counter(key)

    def del_counter(self, key: str) -> None:
        self._state.del_counter(key)
        self._state.del_state(key)

    def put_state(self, key: str, value: bytes | str) -> None:
        self._state.put_state(key, value)
        self._state.del_counter(key)

    def get_state(self, key: str) -> bytes | None:
        return self._state.get_state(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def _load_class(name: Any) -> type:
    if not isinstance(name, str) or "." not in name:
        raise ConfigurationError(
            f"user config {USER_CLASS!r} names the function's class as module.Class, got {name!r}"
        )
    module_name, _, class_name = name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot import {name} ({USER_CLASS}): {exc}") from exc
    if not isinstance(cls, type):
        raise ConfigurationError(f"{name} ({USER_CLASS}) is not a class")
    return cls


class SharedStateFunction(StatefulFunction):
    """Entry point: runs the ``pulsar.Function`` named by user config ``userClass``
    (or the instance given) with its Context state calls on the shared state."""

    def __init__(self, user_function: Any = None) -> None:
        super().__init__()
        self._user = user_function

    def _user_function(self, context: Any) -> Any:
        if self._user is None:
            self._user = _load_class(context.get_user_config_value(USER_CLASS))()
        return self._user

    def handle(self, input: Any, state: FunctionState, context: Any) -> Any:
        return self._user_function(context).process(input, PulsarStateContext(context, state))


def shared_state(cls: type) -> type:
    """Class decorator: ``cls`` (a ``pulsar.Function``) runs with shared, effectively-once
    state; the class keeps its name, so ``--classname`` stays the same."""

    def init(self: SharedStateFunction) -> None:
        SharedStateFunction.__init__(self, cls())

    wrapped = type(cls.__name__, (SharedStateFunction,), {"__init__": init})
    wrapped.__module__ = cls.__module__
    wrapped.__qualname__ = cls.__qualname__
    wrapped.__doc__ = cls.__doc__
    return wrapped
