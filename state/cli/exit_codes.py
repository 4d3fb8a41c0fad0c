"""The exit codes of every ``pulsar-state`` command, and the one place errors become them.

=====  ========================================================================
code   meaning
=====  ========================================================================
0      ok (``map diff``: the two sides are equal)
1      error: a failed operation, a refused write, a bad file, an unreachable
       cluster (``map diff``: the two sides differ, as ``diff`` does)
2      usage: an unknown option, a missing or bad value (a topic name, a key,
       a position, a timeout), unusable settings (:class:`ConfigurationError`)
3      not found: no such topic, key, path or function
=====  ========================================================================

:func:`cli_errors` maps the project's exceptions (the
:class:`~pulsar_state.errors.PulsarStateError` tree, Pulsar's client errors)
to a one-line message on stderr and the code; the ``main`` group runs every
command inside it, so no command maps errors itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import click
import pulsar

from pulsar_state.errors import (
    ConfigurationError,
    NotFoundError,
    PulsarStateError,
    TopicNotFoundError,
)

__all__ = [
    "ERROR",
    "EXIT_CODES_EPILOG",
    "NOT_FOUND",
    "OK",
    "USAGE",
    "NotFoundExit",
    "cli_errors",
    "exit_code_for",
]

OK = 0
ERROR = 1
USAGE = 2
NOT_FOUND = 3

#: the table as ``--help`` shows it (``\b``: click keeps the lines as they are)
EXIT_CODES_EPILOG = (
    "\b\nExit codes:\n"
    "  0  ok\n"
    "  1  error (map diff: the two sides differ)\n"
    "  2  usage: bad option, value, topic name or settings\n"
    "  3  not found: no such topic, key, path or function"
)


class NotFoundExit(click.ClickException):
    """Something the command reads is not there: exit code 3."""

    exit_code = NOT_FOUND


class _UsageExit(click.ClickException):
    """Unusable settings (a :class:`ConfigurationError`): exit code 2."""

    exit_code = USAGE


def _one_line(text: str) -> str:
    return " ".join(text.split())


def exit_code_for(exc: BaseException) -> int:
    """The code a command exits with when ``exc`` escapes it (see the module's table)."""
    if isinstance(exc, click.ClickException):
        return exc.exit_code
    if isinstance(exc, NotFoundError | TopicNotFoundError):
        return NOT_FOUND
    if isinstance(exc, ConfigurationError):
        return USAGE
    if isinstance(exc, PulsarStateError | pulsar.PulsarException | ValueError):
        return ERROR
    raise TypeError(f"not an error a command reports: {exc!r}")


def _as_click(exc: Exception) -> click.ClickException:
    code = exit_code_for(exc)
    if code == NOT_FOUND:
        return NotFoundExit(_one_line(str(exc)))
    if code == USAGE:
        return _UsageExit(_one_line(str(exc)))
    if isinstance(exc, pulsar.PulsarException):
        return click.ClickException(_one_line(f"Pulsar error: {exc}"))
    if isinstance(exc, PulsarStateError):
        return click.ClickException(_one_line(str(exc)))
    return click.ClickException(_one_line(f"invalid input: {exc}"))  # a ValueError


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """The project's errors as CLI errors: ``Error: <one line>`` on stderr, the table's code.

    Click's own errors (usage, :class:`NotFoundExit`) and exits pass through; an
    error of another kind is a bug and keeps its traceback.
    """
    try:
        yield
    except (PulsarStateError, pulsar.PulsarException, ValueError) as exc:
        raise _as_click(exc) from exc
