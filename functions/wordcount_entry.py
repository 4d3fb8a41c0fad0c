"""An example stateful function (``--py`` entry point): counts words, effectively once."""

from __future__ import annotations

from typing import Any

from pulsar_state.functions.stateful import FunctionState, StatefulFunction

__all__ = ["WordCount"]


class WordCount(StatefulFunction):
    def handle(self, input: str, state: FunctionState, context: Any) -> str:
        words = input.split()
        for word in words:
            state.incr_counter(word, 1)
        state.put_state("last", input)
        return f"{input}: {state.get_counter(words[0]) if words else 0}"
