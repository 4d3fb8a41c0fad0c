"""SharedStateManagerBuilder: PIP-137's builder of a :class:`SharedStateManager`.

``SharedStateManager.builder(client, topic, admin_url=...)`` starts one;
``with_*`` calls set the op serializers (or a codec), the initializer, the
applier, snapshots and the config; :meth:`SharedStateManagerBuilder.build`
checks that the required parts are there and opens the manager.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Self, TypeVar

import pulsar

from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.config import StateConfig
from pulsar_state.core.manager import SharedStateManager
from pulsar_state.core.op_codec import OpCodec, SerializerCodec
from pulsar_state.core.snapshot import SnapshotPolicy
from pulsar_state.errors import ConfigurationError

__all__ = ["SharedStateManagerBuilder"]

S = TypeVar("S")
Op = TypeVar("Op")


class SharedStateManagerBuilder(Generic[S, Op]):
    """PIP-137's builder: ``builder(...).with_...().build()``."""

    def __init__(
        self,
        client: pulsar.Client,
        topic: str,
        *,
        admin: AdminEndpoint | None,
    ) -> None:
        self._client = client
        self._topic = topic
        self._admin_endpoint = admin
        self._serializer: Callable[[Op], bytes] | None = None
        self._deserializer: Callable[[bytes], Op] | None = None
        self._codec: OpCodec[Op] | None = None
        self._initializer: Callable[[], S] | None = None
        self._applier: Callable[[S, Op], Any] | None = None
        self._config = StateConfig()
        self._compactable = False
        self._snapshots: SnapshotPolicy[S] | None = None

    def with_op_serializer(self, serializer: Callable[[Op], bytes]) -> Self:
        """Encode each op with ``serializer`` (with :meth:`with_op_deserializer`).

        Returns:
            This builder.
        """
        self._serializer = serializer
        return self

    def with_op_deserializer(self, deserializer: Callable[[bytes], Op]) -> Self:
        """Decode each op with ``deserializer`` (it raises ``ValueError`` on bad input).

        Returns:
            This builder.
        """
        self._deserializer = deserializer
        return self

    def with_op_codec(self, codec: OpCodec[Op], *, compactable: bool = False) -> Self:
        """Keyed ops. ``compactable``: last value per key wins, empty = delete."""
        self._codec = codec
        self._compactable = compactable
        return self

    def with_snapshots(
        self,
        serialize: Callable[[S], bytes],
        deserialize: Callable[[bytes], S],
        *,
        every_writes: int = 1000,
    ) -> Self:
        """Snapshot the state every ``every_writes`` writes (:mod:`pulsar_state.core.snapshot`)."""
        self._snapshots = SnapshotPolicy(
            serialize=serialize, deserialize=deserialize, every_writes=every_writes
        )
        return self

    def with_database_initializer(self, initializer: Callable[[], S]) -> Self:
        """Make the empty state with ``initializer()`` (before the topic is read).

        Returns:
            This builder.
        """
        self._initializer = initializer
        return self

    def with_change_log_applier(self, applier: Callable[[S, Op], Any]) -> Self:
        """Apply each op to the state with ``applier(state, op)``, in topic order.

        Returns:
            This builder.
        """
        self._applier = applier
        return self

    def with_config(self, config: StateConfig | None = None, **overrides: Any) -> Self:
        """A :class:`StateConfig`, or keyword overrides of the current one."""
        base = config or self._config
        self._config = StateConfig(**{**base.__dict__, **overrides}) if overrides else base
        return self

    def build(self) -> SharedStateManager[S, Op]:
        """Make the manager: protect the topic, read it up to now, then return.

        Returns:
            A running :class:`SharedStateManager`, caught up with the topic.

        Raises:
            ConfigurationError: if the codec (serializer and deserializer) or
                the initializer and applier are missing, or ``admin_url`` is
                missing while ``ensure_retention`` is on.
            TypeError: for a client that is no ``pulsar.Client``.
            ForkedProcessError: for a client already used in another process
                (e.g. the parent of this forked one).
            StateTopicError: if the topic cannot be read or protected (its
                subclasses say why: TopicNotFoundError, PermissionDeniedError,
                AdminUnreachableError, InvalidTopicNameError).
            OperationTimeoutError: if the first catch-up takes longer than four
                operation timeouts.
        """
        codec = self._codec
        if codec is None:
            if self._serializer is None or self._deserializer is None:
                raise ConfigurationError(
                    "set with_op_serializer and with_op_deserializer (or with_op_codec)"
                )
            codec = SerializerCodec(self._serializer, self._deserializer)
        if self._initializer is None or self._applier is None:
            raise ConfigurationError(
                "set with_database_initializer and with_change_log_applier before build()"
            )
        return SharedStateManager(
            client=self._client,
            topic=self._topic,
            codec=codec,
            initializer=self._initializer,
            applier=self._applier,
            config=self._config,
            admin=self._admin_endpoint,
            compactable=self._compactable,
            snapshots=self._snapshots,
        )
