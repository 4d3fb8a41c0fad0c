"""pulsar-shared-state: consistent shared state on Apache Pulsar."""

from pulsar_state.aio import (
    AsyncCoordinationService,
    AsyncMapWatch,
    AsyncMetadataStore,
    AsyncPulsarMap,
    AsyncSharedStateManager,
)
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.config import StateConfig
from pulsar_state.coordination import CoordinationService, LockEvent, ResourceLock
from pulsar_state.core.builder import SharedStateManagerBuilder
from pulsar_state.core.manager import SharedStateManager
from pulsar_state.core.op_codec import OpCodec, SerializerCodec
from pulsar_state.errors import (
    AdminUnreachableError,
    BadVersionError,
    CheckpointError,
    ConfigurationError,
    FencedError,
    ForkedProcessError,
    InvalidMessageError,
    InvalidTopicNameError,
    NotFoundError,
    OperationTimeoutError,
    PermissionDeniedError,
    PulsarStateError,
    ResourceBusyError,
    SessionLostError,
    StateClosedError,
    StateTopicError,
    TooManyOpsError,
    TopicNotFoundError,
    ValueTooLargeError,
    WatchOverflowError,
    WriteFailedError,
    WriteInDoubtError,
)
from pulsar_state.map.checkpoint.format import Manifest as CheckpointManifest
from pulsar_state.map.checkpoint.policy import CheckpointPolicy
from pulsar_state.map.memory import MemoryPulsarMap
from pulsar_state.map.pulsar_map import MapOp, PulsarMap
from pulsar_state.map.watch import MapChange, MapWatch
from pulsar_state.metadata.base import BaseMetadataStore
from pulsar_state.metadata.cache import MetadataCache
from pulsar_state.metadata.memory import MemoryMetadataStore
from pulsar_state.metadata.store import MetadataStore
from pulsar_state.metadata.tree import (
    GetResult,
    Notification,
    NotificationType,
    SessionEvent,
    Stat,
)
from pulsar_state.moved import install as _install_moved_paths
from pulsar_state.position import Position
from pulsar_state.retry import RetryPolicy
from pulsar_state.serde import BytesSerde, JsonSerde, KeySerde, Serde, StrKeySerde, StrSerde

__all__ = [
    # State core
    "SharedStateManager",
    "SharedStateManagerBuilder",
    "StateConfig",
    "AdminEndpoint",
    "RetryPolicy",
    "Position",
    "OpCodec",
    "SerializerCodec",
    # Recipes
    "MemoryPulsarMap",
    "PulsarMap",
    "MapOp",
    "MapChange",
    "MapWatch",
    "CheckpointPolicy",
    "CheckpointManifest",
    # Metadata and coordination (PIP-45)
    "BaseMetadataStore",
    "MetadataStore",
    "MemoryMetadataStore",
    "MetadataCache",
    "CoordinationService",
    "ResourceLock",
    "LockEvent",
    "SessionEvent",
    "GetResult",
    "Stat",
    "Notification",
    "NotificationType",
    # asyncio
    "AsyncPulsarMap",
    "AsyncSharedStateManager",
    "AsyncMetadataStore",
    "AsyncCoordinationService",
    "AsyncMapWatch",
    # Serialization
    "Serde",
    "KeySerde",
    "JsonSerde",
    "StrSerde",
    "BytesSerde",
    "StrKeySerde",
    # Errors
    "PulsarStateError",
    "ConfigurationError",
    "StateClosedError",
    "ForkedProcessError",
    "StateTopicError",
    "TopicNotFoundError",
    "InvalidTopicNameError",
    "AdminUnreachableError",
    "FencedError",
    "WriteFailedError",
    "WriteInDoubtError",
    "OperationTimeoutError",
    "PermissionDeniedError",
    "ValueTooLargeError",
    "TooManyOpsError",
    "InvalidMessageError",
    "CheckpointError",
    "BadVersionError",
    "NotFoundError",
    "ResourceBusyError",
    "SessionLostError",
    "WatchOverflowError",
]

# the import paths of modules that moved in 0.2 keep working for one release
_install_moved_paths()
