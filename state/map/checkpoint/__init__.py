"""A map's columnar checkpoints (Arrow IPC chunks and a manifest on a companion topic).

* :mod:`~pulsar_state.map.checkpoint.policy`: when and how they are written;
* :mod:`~pulsar_state.map.checkpoint.format`: the wire format (pure);
* :mod:`~pulsar_state.map.checkpoint.writer`: the holder writes them and keeps the newest;
* :mod:`~pulsar_state.map.checkpoint.read`: a starting map and Spark read them.
"""

from pulsar_state.map.checkpoint.format import Manifest
from pulsar_state.map.checkpoint.policy import CheckpointPolicy, arrow_available
from pulsar_state.map.checkpoint.read import LoadedCheckpoint, find_manifest, read_chunks
from pulsar_state.map.checkpoint.writer import KEEPER_SUBSCRIPTION, MapCheckpointer

__all__ = [
    "KEEPER_SUBSCRIPTION",
    "CheckpointPolicy",
    "LoadedCheckpoint",
    "MapCheckpointer",
    "Manifest",
    "arrow_available",
    "find_manifest",
    "read_chunks",
]
