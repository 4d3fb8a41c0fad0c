"""What a worker runs: a function's record, read as a :class:`FunctionSpec`.

The records are the ones
:class:`~pulsar_state.functions.metadata_manager.FunctionMetadataManager`
keeps (``{"fqn", "version", "config", ...}``, the config checked by
:func:`~pulsar_state.functions.metadata_manager.validate_config`). The spec
holds what one instance needs: where the code is and what to load from it,
its topics, its user config and how it consumes. The code is ``py`` (a path
or URL) or, uploaded, ``package`` (``pss://sha256/<hex>``) with ``py`` its
file's name (:mod:`~pulsar_state.functions.package_cache`).

How it consumes follows Pulsar's functions worker: the subscription is
``subscriptionName`` or ``tenant/namespace/name``; it is a **failover**
subscription when ``retainOrdering`` is set or the guarantee is
``EFFECTIVELY_ONCE`` (one active consumer per input partition, in order: what
the stateful kit needs), a shared one otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pulsar_state.functions.metadata_manager import validate_config, validate_fqn

__all__ = ["FunctionSpec"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FunctionSpec:
    """One function as a worker runs it (see the module docstring)."""

    fqn: str
    class_name: str
    inputs: tuple[str, ...]
    output: str | None = None
    user_config: dict[str, Any] = field(default_factory=dict)
    parallelism: int = 1
    #: the code package (a ``.py`` file or a ``.zip``), ``None``: importable as is
    py: str | None = None
    #: the uploaded code package (``pss://sha256/<hex>``, ``py`` its file name), ``None``: none
    package: str | None = None
    processing_guarantees: str = "ATLEAST_ONCE"
    retain_ordering: bool = False
    subscription_name: str | None = None
    subscription_position: str = "Latest"
    #: secret name -> the environment variable of the worker holding its value
    secrets: dict[str, str] = field(default_factory=dict)
    #: the record's version (an update restarts the instances)
    version: int = 0

    @classmethod
    def from_record(cls, fqn: str, record: Any) -> FunctionSpec:
        """The spec of a metadata record; ``ValueError`` for one that is not well formed."""
        if not isinstance(record, dict):
            raise ValueError(f"the record of {fqn} is not an object")
        config = validate_config(record.get("config"))
        version = record.get("version", 0)
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError(f"the record of {fqn} has no int version")
        return cls(
            fqn=validate_fqn(fqn),
            class_name=config["className"],
            inputs=tuple(config["inputs"]),
            output=config.get("output"),
            user_config=dict(config.get("userConfig") or {}),
            parallelism=config["parallelism"],
            py=config.get("py"),
            package=config.get("package"),
            processing_guarantees=config.get("processingGuarantees", "ATLEAST_ONCE"),
            retain_ordering=bool(config.get("retainOrdering", False)),
            subscription_name=config.get("subscriptionName"),
            subscription_position=config.get("subscriptionPosition", "Latest"),
            secrets=dict(config.get("secrets") or {}),
            version=version,
        )

    def resolve_secrets(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The secrets' values from the worker's environment (``context.get_secret``).

        The records name an environment variable per secret, never the value, so
        tokens stay off the metadata topic; a variable the worker lacks leaves its
        secret out (``get_secret`` gives ``None``) and is logged.

        Returns:
            secret name -> value, for each secret whose variable is set.
        """
        found: dict[str, str] = {}
        for name, variable in sorted(self.secrets.items()):
            value = environ.get(variable)
            if value is None:
                log.warning(
                    "%s: secret %s: the worker has no environment variable %s",
                    self.fqn,
                    name,
                    variable,
                )
            else:
                found[name] = value
        return found

    @property
    def tenant(self) -> str:
        return self.fqn.split("/")[0]

    @property
    def namespace(self) -> str:
        return self.fqn.split("/")[1]

    @property
    def name(self) -> str:
        return self.fqn.split("/")[2]

    @property
    def subscription(self) -> str:
        """The input subscription: ``subscriptionName``, else ``tenant/namespace/name``."""
        return self.subscription_name or self.fqn

    @property
    def in_order(self) -> bool:
        """A failover subscription (``retainOrdering`` or ``EFFECTIVELY_ONCE``)."""
        return self.retain_ordering or self.processing_guarantees == "EFFECTIVELY_ONCE"
