"""Pulsar's ``Context`` for an instance the worker runs: :class:`InstanceContext`.

The calls of Pulsar's Python ``ContextImpl`` (``pulsar.Context``), so that a
function written for Pulsar's worker runs here unchanged: the current message
(id, key, properties, topic, event time), the function's names, instance id,
user config and secrets, a logger, metrics, ``publish`` (a producer per topic,
``serde.IdentitySerDe`` by default) and the Pulsar client. What the packaged
kits read from Pulsar's runtime is here too: ``instance_config.function_details``
(``retainOrdering``, the subscription type) and ``consumers`` (the input
consumer by topic, to ask for a redelivery).

State calls (``incr_counter``, ``put_state``...) are Pulsar's BookKeeper
table service, which this worker does not have: they raise
:class:`~pulsar_state.errors.ConfigurationError` naming the shared-state kit
(:mod:`~pulsar_state.functions.pulsar_context`), which gives the same calls,
effectively once. A function built on the kit never reaches them.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulsar
from pulsar.functions import serde as pulsar_serde

from pulsar_state.errors import ConfigurationError
from pulsar_state.functions.function_spec import FunctionSpec

__all__ = ["FunctionDetails", "InstanceConfig", "InstanceContext", "load_serde"]

_FAILOVER, _SHARED = 1, 0  # proto.SubscriptionType
_GUARANTEES = {"ATLEAST_ONCE": 0, "ATMOST_ONCE": 1, "EFFECTIVELY_ONCE": 2}


def load_serde(name: str) -> Any:
    """A serde object by class name: ``serde.IdentitySerDe`` (Pulsar's spelling) or
    ``module.Class``.

    Raises:
        ConfigurationError: the class is not found.
    """
    module_name, _, class_name = name.rpartition(".")
    try:
        module = pulsar_serde if module_name == "serde" else importlib.import_module(module_name)
        return getattr(module, class_name)()
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigurationError(f"cannot load the serde {name!r}: {exc}") from exc


@dataclass(frozen=True)
class _Source:
    subscriptionType: int  # noqa: N815 - the protobuf's spelling


@dataclass(frozen=True)
class FunctionDetails:
    """The fields of Pulsar's ``FunctionDetails`` protobuf that the kits read."""

    tenant: str
    namespace: str
    name: str
    parallelism: int
    retainOrdering: bool  # noqa: N815
    processingGuarantees: int  # noqa: N815
    source: _Source


@dataclass(frozen=True)
class InstanceConfig:
    """``context.instance_config``, as Pulsar's runtime has it."""

    instance_id: int
    function_details: FunctionDetails
    function_id: str = ""
    function_version: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class InstanceContext(pulsar.Context):  # type: ignore[misc]
    """See the module docstring. One per instance; the runner sets the current message."""

    def __init__(
        self,
        spec: FunctionSpec,
        instance_id: int,
        client: pulsar.Client,
        *,
        secrets: dict[str, str] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.spec = spec
        self._client = client
        self._secrets = dict(secrets or {})
        self._logger = logger or logging.getLogger(f"pulsar_state.function.{spec.fqn}")
        self.instance_config = InstanceConfig(
            instance_id=instance_id,
            function_details=FunctionDetails(
                tenant=spec.tenant,
                namespace=spec.namespace,
                name=spec.name,
                parallelism=spec.parallelism,
                retainOrdering=spec.in_order,
                processingGuarantees=_GUARANTEES[spec.processing_guarantees],
                source=_Source(_FAILOVER if spec.in_order else _SHARED),
            ),
            function_id=spec.fqn,
            function_version=str(spec.version),
        )
        #: input topic -> its consumer (Pulsar's runtime keeps them so)
        self.consumers: dict[str, Any] = {}
        self.message: Any = None
        self.metrics: dict[str, float] = {}
        self._producers: dict[str, pulsar.Producer] = {}
        self._lock = threading.Lock()

    # -- the current message -----------------------------------------------------------

    def get_message_id(self) -> Any:
        return self.message.message_id()

    def get_message_key(self) -> Any:
        return self.message.partition_key()

    def get_partition_key(self) -> Any:
        return self.message.partition_key()

    def get_ordering_key(self) -> Any:
        ordering_key = getattr(self.message, "ordering_key", None)
        return ordering_key() if callable(ordering_key) else None

    def get_message_eventtime(self) -> Any:
        return self.message.event_timestamp()

    def get_message_properties(self) -> Any:
        return self.message.properties()

    def get_current_message_topic_name(self) -> Any:
        return self.message.topic_name()

    # -- the function --------------------------------------------------------------------

    def get_function_tenant(self) -> str:
        return self.spec.tenant

    def get_function_namespace(self) -> str:
        return self.spec.namespace

    def get_function_name(self) -> str:
        return self.spec.name

    def get_function_id(self) -> str:
        return self.spec.fqn

    def get_instance_id(self) -> int:
        return int(self.instance_config.instance_id)

    def get_function_version(self) -> str:
        return str(self.spec.version)

    def get_logger(self) -> logging.Logger:
        return self._logger

    def get_user_config_value(self, key: str) -> Any:
        return self.spec.user_config.get(key)

    def get_user_config_map(self) -> dict[str, Any]:
        return dict(self.spec.user_config)

    def get_secret(self, secret_name: str) -> str | None:
        return self._secrets.get(secret_name)

    def get_input_topics(self) -> list[str]:
        return list(self.spec.inputs)

    def get_output_topic(self) -> str | None:
        return self.spec.output

    def get_output_serde_class_name(self) -> str:
        return "serde.IdentitySerDe"

    def get_pulsar_client(self) -> pulsar.Client:
        return self._client

    def record_metric(self, metric_name: str, metric_value: float) -> None:
        with self._lock:
            self.metrics[metric_name] = self.metrics.get(metric_name, 0) + metric_value

    # -- messages --------------------------------------------------------------------------

    def publish(  # noqa: PLR0917 - pulsar.Context.publish
        self,
        topic_name: str,
        message: Any,
        serde_class_name: str = "serde.IdentitySerDe",
        properties: dict[str, str] | None = None,
        compression_type: Any = None,
        callback: Callable[..., Any] | None = None,
        message_conf: dict[str, Any] | None = None,
    ) -> None:
        with self._lock:
            producer = self._producers.get(topic_name)
            if producer is None:
                extra = {} if compression_type is None else {"compression_type": compression_type}
                producer = self._client.create_producer(
                    topic_name, block_if_queue_full=True, **extra
                )
                self._producers[topic_name] = producer
        payload = bytes(load_serde(serde_class_name).serialize(message))

        def sent(result: Any, msg_id: Any) -> None:
            if result != pulsar.Result.Ok:
                self._logger.error("publishing to %s failed: %s", topic_name, result)
            if callback is not None:
                callback(result, msg_id)

        producer.send_async(payload, sent, properties=properties, **(message_conf or {}))

    def ack(self, msgid: Any, topic: str) -> None:
        consumer = self.consumers.get(topic)
        if consumer is None:
            raise ConfigurationError(f"{topic!r} is not an input of {self.spec.fqn}")
        consumer.acknowledge(msgid)

    def flush(self) -> None:
        """Wait until what :meth:`publish` sent is stored; close its producers."""
        with self._lock:
            producers, self._producers = list(self._producers.values()), {}
        for producer in producers:
            try:
                producer.flush()
                producer.close()
            except pulsar.PulsarException:
                self._logger.warning("closing a publish producer failed", exc_info=True)

    # -- state: the kit's, not BookKeeper's ----------------------------------------------

    def _no_table_service(self, *_args: Any) -> Any:
        raise ConfigurationError(
            "this worker has no BookKeeper table service for Context state calls: run the "
            "function as className pulsar_state.functions.pulsar_context.SharedStateFunction "
            "with userConfig.userClass naming it (or decorate it with @shared_state), "
            "retainOrdering: true; its state calls are then effectively once"
        )

    incr_counter = _no_table_service
    get_counter = _no_table_service
    del_counter = _no_table_service
    put_state = _no_table_service
    get_state = _no_table_service
