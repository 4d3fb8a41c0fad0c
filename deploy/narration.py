"""What the demo tells whoever watches it: lines on stdout, each step in bold on a terminal."""

from __future__ import annotations

import sys

__all__ = ["say", "step"]


def say(text: str, *, err: bool = False) -> None:
    """One line on stdout (stderr with ``err``), at once."""
    print(text, file=sys.stderr if err else sys.stdout, flush=True)


def step(text: str) -> None:
    """``==> text``, in bold when stdout is a terminal."""
    line = f"==> {text}"
    say(f"\033[1m{line}\033[0m" if sys.stdout.isatty() else line)
