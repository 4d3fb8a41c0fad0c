"""FunctionMetadataManager: a Pulsar Function keeping function records in the shared state.

Pulsar's own function worker keeps ``FunctionMetaData`` records keyed by fully
qualified name on a compacted metadata topic, written only by the leader. This
function does the same for Python applications: it consumes requests, checks
them, versions them and writes them through the state core (a ``PulsarMap`` on
``metadataTopic``: key ``tenant/namespace/name``, value the record), and
answers on its output topic.

Requests (JSON)::

    {"op": "create", "fqn": "t/ns/f", "config": {...}}
    {"op": "update", "fqn": "t/ns/f", "config": {...}, "expectedVersion": 3}
    {"op": "delete", "fqn": "t/ns/f", "expectedVersion": 4}
    {"op": "get",    "fqn": "t/ns/f"}

Answers: ``{"ok": true, "fqn": ..., "version": n, "record": {...}}`` or
``{"ok": false, "fqn": ..., "error": "..."}``, with the request's ``requestId``
(any JSON value) echoed when it has one, to match answers to requests: input
is at-least-once, so a request redelivered after an instance died is answered
again (a repeated create or versioned update then fails harmlessly). A record is
``{"fqn", "version", "config", "createTime", "updateTime"}``; versions start at
0 and grow by one. An update or delete whose ``expectedVersion`` is not the
current one is rejected as stale (and so is a redelivered one: versioned
compare-and-set makes redelivery harmless). Config: ``parallelism`` (int >= 1),
``className`` (str), ``inputs`` (non-empty list of topics), ``output``
(optional str), ``userConfig`` (optional object), and what a worker needs to
run it (:mod:`~pulsar_state.functions.function_spec`): ``py`` (optional: the
code package, a ``.py`` file or ``.zip`` every worker can read, or an
``http(s)://`` URL), ``package`` (``pss://sha256/<hex>``: the code uploaded
into the group's package store, ``py`` then being its file's name),
``processingGuarantees`` (``ATLEAST_ONCE`` by default, ``ATMOST_ONCE``,
``EFFECTIVELY_ONCE``), ``retainOrdering`` (bool), ``subscriptionName`` (str),
``subscriptionPosition`` (``Latest`` by default, or ``Earliest``), ``secrets``
(an object: secret name -> the name of an environment variable of the worker
that holds its value; the values never enter the records); others are refused.

Deploy with ``retainOrdering: true`` (one active instance, requests in order:
the leader writes). Any instance of anything may read the records: a
``PulsarMap``, Pulsar's ``TableView``, ``pulsar-state map``, Spark.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from pulsar import Function

from pulsar_state.errors import PulsarStateError
from pulsar_state.functions.function_map import open_function_map
from pulsar_state.functions.package_manifest import parse_package_url, valid_file_name
from pulsar_state.map.pulsar_map import MapOp, PulsarMap
from pulsar_state.runtime.instance_metrics import label_instance_metrics

__all__ = [
    "GUARANTEES",
    "POSITIONS",
    "FunctionMetadataManager",
    "RequestError",
    "validate_config",
    "validate_fqn",
]

_ALLOWED = {
    "parallelism",
    "className",
    "inputs",
    "output",
    "userConfig",
    "py",
    "package",
    "processingGuarantees",
    "retainOrdering",
    "subscriptionName",
    "subscriptionPosition",
    "secrets",
}
#: an environment variable's name (a secret's value is read from one on the worker)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: the processing guarantees of Pulsar's ``FunctionConfig``
GUARANTEES = ("ATLEAST_ONCE", "ATMOST_ONCE", "EFFECTIVELY_ONCE")
#: where a new subscription starts (Pulsar's ``SubscriptionInitialPosition``)
POSITIONS = ("Latest", "Earliest")


class RequestError(ValueError):
    """A request that cannot be carried out (bad input or a stale version)."""


def validate_fqn(fqn: Any) -> str:
    if not isinstance(fqn, str):
        raise RequestError("fqn must be a string tenant/namespace/name")
    parts = fqn.split("/")
    if len(parts) != 3 or not all(p and p.strip() == p for p in parts):
        raise RequestError(f"fqn must be tenant/namespace/name, got {fqn!r}")
    return fqn


def validate_config(config: Any) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise RequestError("config must be an object")
    unknown = set(config) - _ALLOWED
    if unknown:
        raise RequestError(f"unknown config fields: {sorted(unknown)}")
    parallelism = config.get("parallelism", 1)
    if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
        raise RequestError(f"parallelism must be an int >= 1, got {parallelism!r}")
    if not isinstance(config.get("className"), str) or not config["className"]:
        raise RequestError("className is required (a non-empty string)")
    inputs = config.get("inputs")
    if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) for t in inputs):
        raise RequestError("inputs must be a non-empty list of topic names")
    if "output" in config and not isinstance(config["output"], str):
        raise RequestError("output must be a topic name")
    if "userConfig" in config and not isinstance(config["userConfig"], dict):
        raise RequestError("userConfig must be an object")
    for key in ("py", "subscriptionName"):
        if key in config and (not isinstance(config[key], str) or not config[key]):
            raise RequestError(f"{key} must be a non-empty string")
    if "package" in config:
        try:
            parse_package_url(config["package"])
        except ValueError as exc:
            raise RequestError(str(exc)) from exc
        if not valid_file_name(config.get("py")):
            raise RequestError("with a package, py is its file's name (a .py or .zip, no folder)")
    if config.get("processingGuarantees", GUARANTEES[0]) not in GUARANTEES:
        raise RequestError(f"processingGuarantees must be one of {', '.join(GUARANTEES)}")
    if "retainOrdering" in config and not isinstance(config["retainOrdering"], bool):
        raise RequestError("retainOrdering must be true or false")
    if config.get("subscriptionPosition", POSITIONS[0]) not in POSITIONS:
        raise RequestError(f"subscriptionPosition must be one of {', '.join(POSITIONS)}")
    secrets = config.get("secrets", {})
    if not isinstance(secrets, dict) or not all(
        isinstance(name, str) and name and isinstance(env, str) and _ENV_NAME.match(env)
        for name, env in secrets.items()
    ):
        raise RequestError(
            "secrets must map each secret's name to the name of an environment variable "
            "of the workers that holds its value (the value itself is never stored)"
        )
    return {**config, "parallelism": parallelism}


def _answer(request: Any, answer: dict[str, Any]) -> str:
    if isinstance(request, dict) and "requestId" in request:
        answer["requestId"] = request["requestId"]
    return json.dumps(answer)


class FunctionMetadataManager(Function):  # type: ignore[misc]
    """See the module docstring."""

    def __init__(self) -> None:
        self._map: PulsarMap[str, Any] | None = None
        self._lock = threading.Lock()

    def _records(self, context: Any) -> PulsarMap[str, Any]:
        with self._lock:
            if self._map is None:
                label_instance_metrics(context)
                self._map = open_function_map(context, "metadataTopic", "function-metadata")
            return self._map

    def process(self, input: Any, context: Any) -> str:
        request: Any = None
        try:
            request = json.loads(input)
            if not isinstance(request, dict):
                raise RequestError("a request is a JSON object")
            fqn = validate_fqn(request.get("fqn"))
        except (ValueError, TypeError) as exc:
            context.get_logger().warning("refused request: %s", exc)
            return _answer(request, {"ok": False, "error": str(exc)})
        try:
            return _answer(request, self.handle(request, fqn, self._records(context)))
        except RequestError as exc:
            return _answer(request, {"ok": False, "fqn": fqn, "error": str(exc)})

    @staticmethod
    def handle(request: dict[str, Any], fqn: str, records: PulsarMap[str, Any]) -> dict[str, Any]:
        """Carry out one request against the records (also usable without a worker)."""
        op = request.get("op")
        if op == "get":
            record = records.get(fqn, latest=True).result(timeout=60)
            if record is None:
                raise RequestError("not found")
            return {"ok": True, "fqn": fqn, "version": record["version"], "record": record}
        expected = request.get("expectedVersion")
        if expected is not None and (not isinstance(expected, int) or isinstance(expected, bool)):
            raise RequestError("expectedVersion must be an int")
        if op in ("create", "update"):
            config = validate_config(request.get("config"))
        elif op != "delete":
            raise RequestError(f"op must be create, update, delete or get, got {op!r}")
        outcome: dict[str, Any] = {}

        def gen(state: Mapping[str, Any]) -> list[MapOp[str, Any]]:
            current = state.get(fqn)
            now = int(time.time() * 1000)
            if op == "create":
                if current is not None:
                    raise RequestError(f"{fqn} exists (version {current['version']})")
                record = {
                    "fqn": fqn,
                    "version": 0,
                    "config": config,
                    "createTime": now,
                    "updateTime": now,
                }
            else:
                if current is None:
                    raise RequestError(f"{fqn} does not exist")
                if expected is not None and expected != current["version"]:
                    raise RequestError(
                        f"stale: expected version {expected}, current is {current['version']}"
                    )
                if op == "delete":
                    outcome["record"] = current
                    return [MapOp.delete(fqn)]
                record = {
                    **current,
                    "version": current["version"] + 1,
                    "config": config,
                    "updateTime": now,
                }
            outcome["record"] = record
            return [MapOp.put(fqn, record)]

        try:
            records.transact(gen).result(timeout=60)
        except RequestError:
            raise
        except PulsarStateError as exc:
            raise RequestError(f"could not write: {exc}") from exc
        record = outcome["record"]
        return {"ok": True, "fqn": fqn, "version": record["version"], "record": record}

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
