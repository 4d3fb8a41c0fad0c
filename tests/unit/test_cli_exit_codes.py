"""The ``pulsar-state`` exit-code table, its one error mapping, and wrong input typed at the CLI.

No broker: everything here fails (or is shown) before a command connects.
"""

from __future__ import annotations

import click
import pulsar
import pytest
from click.testing import CliRunner, Result

from pulsar_state.cli import main
from pulsar_state.cli.exit_codes import (
    ERROR,
    NOT_FOUND,
    OK,
    USAGE,
    NotFoundExit,
    cli_errors,
    exit_code_for,
)
from pulsar_state.cli.options import DEFAULT_TIMEOUT_S
from pulsar_state.deploy.errors import BrokerStartError, PulsarAdminError
from pulsar_state.errors import (
    AdminUnreachableError,
    BadVersionError,
    ConfigurationError,
    FencedError,
    InvalidTopicNameError,
    NotFoundError,
    OperationTimeoutError,
    PermissionDeniedError,
    PulsarStateError,
    TopicNotFoundError,
    ValueTooLargeError,
)
from pulsar_state.functions.queryable_state import FunctionNotFoundError

# no broker listens here: a command that got as far as connecting would fail with 1, not 2
NOWHERE = {"PULSAR_SERVICE_URL": "pulsar://127.0.0.1:9", "PULSAR_ADMIN_URL": "http://127.0.0.1:9"}


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=NOWHERE)


def test_the_table() -> None:
    assert (OK, ERROR, USAGE, NOT_FOUND) == (0, 1, 2, 3)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (PulsarStateError("x"), ERROR),
        (FencedError("x"), ERROR),
        (BadVersionError("/a", expected=1, actual=2), ERROR),
        (OperationTimeoutError("x"), ERROR),
        (AdminUnreachableError("x"), ERROR),
        (PermissionDeniedError("x"), ERROR),
        (ValueTooLargeError(10, 5), ERROR),
        (PulsarAdminError(["functions", "create"], 1, "refused"), ERROR),
        (BrokerStartError("x"), ERROR),
        (pulsar.Timeout("x"), ERROR),
        (ValueError("x"), ERROR),
        (ConfigurationError("x"), USAGE),
        (InvalidTopicNameError("x"), USAGE),
        (NotFoundError("x"), NOT_FOUND),
        (FunctionNotFoundError("x"), NOT_FOUND),
        (TopicNotFoundError("x"), NOT_FOUND),
        (NotFoundExit("x"), NOT_FOUND),
        (click.UsageError("x"), USAGE),
        (click.ClickException("x"), ERROR),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_each_error_has_its_code(error: Exception, code: int) -> None:
    assert exit_code_for(error) == code
    with pytest.raises(click.ClickException) as raised, cli_errors():
        raise error
    assert raised.value.exit_code == code


def test_the_message_is_one_line() -> None:
    with pytest.raises(click.ClickException) as raised, cli_errors():
        raise PulsarAdminError(["functions", "create"], 1, "HTTP 500\n  reason: boom\n")
    assert raised.value.format_message() == (
        "pulsar-admin functions create ... failed (exit 1): HTTP 500 reason: boom"
    )
    with pytest.raises(click.ClickException) as raised, cli_errors():
        raise pulsar.Timeout("slow")
    assert raised.value.format_message() == "Pulsar error: slow"


def test_a_bug_keeps_its_traceback() -> None:
    with pytest.raises(KeyError), cli_errors():
        raise KeyError("a bug, not an error a command reports")
    with pytest.raises(TypeError):
        exit_code_for(KeyError("x"))


def test_every_command_runs_inside_the_mapping() -> None:
    """An error escaping a command is mapped by the main group, message on stderr."""

    @main.command("raise-for-test", hidden=True)
    @click.argument("kind")
    def raise_for_test(kind: str) -> None:
        raise {"found": NotFoundError, "config": ConfigurationError, "state": FencedError}[kind](
            "two\nlines"
        )

    try:
        for kind, code in (("found", 3), ("config", 2), ("state", 1)):
            result = _run("raise-for-test", kind)
            assert result.exit_code == code, result.output
            assert result.stderr == "Error: two lines\n", result.stderr
            assert result.stdout == ""
    finally:
        main.commands.pop("raise-for-test")


@pytest.mark.parametrize("group", [(), ("map",), ("meta",), ("functions",), ("sink",), ("broker",)])
def test_help_shows_the_table(group: tuple[str, ...]) -> None:
    shown = _run(*group, "--help")
    assert shown.exit_code == 0, shown.output
    lines = [line.strip() for line in shown.output.splitlines()]
    table = lines[lines.index("Exit codes:") :]
    assert table[1:5] == [
        "0  ok",
        "1  error (map diff: the two sides differ)",
        "2  usage: bad option, value, topic name or settings",
        "3  not found: no such topic, key, path or function",
    ]


@pytest.mark.parametrize("command", [("map",), ("meta",), ("functions", "querystate")])
def test_one_timeout_option(command: tuple[str, ...]) -> None:
    """map, meta and functions querystate: the same --timeout, same meaning and default."""
    shown = _run(*command, "--help")
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "--timeout FLOAT RANGE Seconds each operation (open, read, write) may take." in text
    assert f"[default: {DEFAULT_TIMEOUT_S}; x>0]" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # unknown option
        (("map", "--topic", "t", "get", "k", "--bogus"), "No such option '--bogus'"),
        (("meta", "--topic", "t", "ls", "--bogus"), "No such option '--bogus'"),
        (("functions", "querystate", "--name", "f", "-k", "k", "--bogus"), "No such option"),
        # a bad --timeout: the same refusal everywhere
        (("map", "--timeout", "0", "--topic", "t", "ls"), "Invalid value for '--timeout'"),
        (("meta", "--timeout", "-1", "--topic", "t", "ls"), "Invalid value for '--timeout'"),
        (
            ("functions", "querystate", "--name", "f", "-k", "k", "--timeout", "0"),
            "Invalid value for '--timeout'",
        ),
        (("map", "--timeout", "soon", "--topic", "t", "ls"), "Invalid value for '--timeout'"),
        # other bad values
        (("map", "--topic", "t", "ls", "--output", "xml"), "Invalid value for '--output'"),
        (("meta", "--topic", "t", "get", "/a", "--output", "xml"), "Invalid value for '--output'"),
        (
            ("functions", "querystate", "--name", "f", "-k", "k", "--output", "xml"),
            "Invalid value for '--output'",
        ),
        (("map", "--topic", "bad//name", "ls"), "Invalid value for '--topic'"),
        # compaction would drop a value under an empty key
        (("map", "--topic", "t", "put", "", "1"), "a key must not be empty"),
        (("meta", "--topic", "t", "get", "no-slash"), "Invalid value for 'PATH'"),
        (("functions", "querystate", "--fqfn", "a/b", "-k", "k"), "tenant/namespace/name"),
        (("functions", "querystate", "--name", "f", "-k", "k", "--interval", "0"), "--interval"),
        # missing
        (("map", "get", "k"), "Missing option '--topic'"),
        (("meta", "ls"), "Missing option '--topic'"),
        (("functions", "querystate", "--name", "f"), "Missing option '-k' / '--key'"),
    ],
)
def test_wrong_input_is_a_usage_error(args: tuple[str, ...], message: str) -> None:
    result = _run(*args)
    assert result.exit_code == USAGE, (args, result.exit_code, result.output)
    assert message in result.stderr, (args, result.stderr)
    assert result.stdout == ""
    assert result.exception is None or isinstance(result.exception, SystemExit)
