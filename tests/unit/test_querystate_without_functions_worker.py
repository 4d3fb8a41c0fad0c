"""Queryable state on brokers without Pulsar's functions worker.

Such a broker answers ``GET /admin/v3/functions/...`` with 409 ("Pulsar
Function Worker is not enabled"), as on a cluster whose functions run on
``pulsar-state worker``. The reader then looks under the kit's default state
topic, as for a function that is not registered (found on the local cluster by
``tests/cluster/test_commands_through_any_broker.py``); a refusal or any other
answer is still an error.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any, cast

import pulsar
import pytest
from http_stub import reply_json, serving

from pulsar_state.errors import PermissionDeniedError, StateTopicError
from pulsar_state.functions.queryable_state import FunctionStateReader


def _broker_answering(status: int, body: object) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            reply_json(self, status, body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


NOT_ENABLED = {"reason": "Pulsar Function Worker is not enabled, probably functionsWorkerEnabled"}


@pytest.mark.parametrize(
    ("status", "body"), [(409, NOT_ENABLED), (404, {"reason": "Function wc doesn't exist"})]
)
def test_no_functions_worker_means_the_default_state_topic(status: int, body: object) -> None:
    with serving(_broker_answering(status, body)) as url:
        reader = FunctionStateReader(client=cast(pulsar.Client, None), admin_url=url, timeout_s=5)
        try:
            topic, registered = reader.state_topic("public", "default", "wc")
        finally:
            reader.close()
    assert (topic, registered) == ("persistent://public/default/wc-pss-state", False)


@pytest.mark.parametrize(
    ("status", "error"),
    [(401, PermissionDeniedError), (403, PermissionDeniedError), (400, StateTopicError)],
)
def test_other_answers_stay_errors(status: int, error: type[Exception]) -> None:
    with serving(_broker_answering(status, {"reason": "no"})) as url:
        reader = FunctionStateReader(client=cast(pulsar.Client, None), admin_url=url, timeout_s=5)
        try:
            with pytest.raises(error):
                reader.state_topic("public", "default", "wc")
        finally:
            reader.close()
