"""A tiny Python Pulsar Function: proof that the worker runs Python functions.

Deployed as a single file (``--py smoke.py --classname smoke.Exclaim``), so it
imports nothing but ``pulsar``. It appends ``!`` to each string it receives and
counts what it processed in its metrics.
"""

from __future__ import annotations

from typing import Any

from pulsar import Function


class Exclaim(Function):  # type: ignore[misc]
    """``"hello"`` -> ``"hello!"``."""

    def process(self, input: str, context: Any) -> str:
        context.record_metric("smoke_processed", 1)
        return f"{input}!"
