"""Single-file entry point for ``--py``: the worker imports this module by file name."""

from pulsar_state.functions.metadata_manager import FunctionMetadataManager

__all__ = ["FunctionMetadataManager"]
