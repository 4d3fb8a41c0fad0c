"""A word-count Pulsar Function on the stateful kit (deployed by the tests with --py)."""

from __future__ import annotations

from typing import Any

from pulsar_state.functions.stateful import FunctionState, StatefulFunction


class WordCount(StatefulFunction):
    def handle(self, input: str, state: FunctionState, context: Any) -> str:
        for word in input.split():
            state.incr_counter(word, 1)
        state.put_state("last", input)
        return f"{input}: {state.get_counter(input.split(maxsplit=1)[0]) if input.split() else 0}"
