"""``pulsar-state deploy``/``undeploy`` with ``--admin-client cli``: pulsar-admin
saying a function is not there answers "no" (``exists``, ``delete``); any other
failure is raised."""

from __future__ import annotations

import pytest

from pulsar_state.deploy import functions_deploy
from pulsar_state.deploy.errors import PulsarAdminError

FQN = ("public", "default", "f")


class _Cli:
    """Stands in for :class:`PulsarAdminCli`: fails each call with ``output``."""

    def __init__(self, output: str | None) -> None:
        self.output = output
        self.calls: list[str] = []

    def _answer(self, call: str) -> None:
        self.calls.append(call)
        if self.output is not None:
            raise PulsarAdminError(["functions", call], 1, self.output)

    def function_status(self, fqn: tuple[str, str, str]) -> dict[str, object]:
        self._answer("status")
        return {}

    def delete_function(self, fqn: tuple[str, str, str]) -> None:
        self._answer("delete")


def _admin(output: str | None) -> functions_deploy._CliAdmin:
    admin = functions_deploy._CliAdmin.__new__(functions_deploy._CliAdmin)
    admin.cli = _Cli(output)  # type: ignore[assignment]
    return admin


def test_a_function_there_exists_and_is_deleted() -> None:
    admin = _admin(None)
    assert admin.exists(FQN) is True
    assert admin.delete(FQN) is True
    assert admin.cli.calls == ["status", "delete"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "output",
    [
        "Function f doesn't exist",
        "Reason: Function public/default/f does not exist",
        "HTTP 404 Not Found",
    ],
)
def test_a_missing_function_is_no_and_nothing_to_delete(output: str) -> None:
    admin = _admin(output)
    assert admin.exists(FQN) is False
    assert admin.delete(FQN) is False


def test_any_other_failure_is_raised() -> None:
    admin = _admin("HTTP 401 Unauthorized")
    with pytest.raises(PulsarAdminError, match="401"):
        admin.exists(FQN)
    with pytest.raises(PulsarAdminError, match="401"):
        admin.delete(FQN)
