"""Which parts of the source this PySpark can run, and a clear error for the rest.

Batch reads (snapshots and changelogs, Arrow batches, checkpoints) need the
Python Data Source API of PySpark 4.0. Two parts need newer releases:

- key filter pushdown (``pushdown=true``): the filter classes of
  ``pyspark.sql.datasource`` (``EqualTo``, ``In``), PySpark 4.1;
- streaming reads: ``pyspark.sql.streaming.datasource.SupportsTriggerAvailableNow``,
  PySpark 4.2.

Each is imported only when a query asks for it, so an older PySpark runs the
rest; asking for a missing part raises :class:`~pulsar_state.errors.ConfigurationError`
naming the release it needs and the one installed. ``make check-min-deps``
runs the batch reads on the oldest PySpark allowed and the streams on the
oldest that has them.
"""

from __future__ import annotations

from pulsar_state.errors import ConfigurationError

__all__ = ["PUSHDOWN_SINCE", "STREAMING_SINCE", "unsupported"]

#: the first PySpark with the filter classes pushdown needs
PUSHDOWN_SINCE = "4.1"
#: the first PySpark with SupportsTriggerAvailableNow, which the streams need
STREAMING_SINCE = "4.2"


def _installed() -> str:
    try:
        import pyspark  # noqa: PLC0415

        return str(pyspark.__version__)
    except ImportError:  # pragma: no cover - the source cannot load without it
        return "not installed"


def unsupported(feature: str, since: str, cause: ImportError) -> ConfigurationError:
    """The error for ``feature`` on a PySpark older than ``since``.

    Returns:
        A :class:`ConfigurationError` naming the feature, the release it needs,
        the installed one and the import that failed (chain ``cause``).
    """
    return ConfigurationError(
        f"pulsar_state: {feature} needs PySpark >= {since}; this is PySpark "
        f"{_installed()} ({cause}). Batch reads work on PySpark >= 4.0; "
        f"install pyspark>={since} for {feature}."
    )
