"""Spark finds the ``pulsar_state`` data source by itself through this module.

When a session first needs a Python data source, Spark imports every
top-level module whose name starts with ``pyspark_`` and registers its
``DefaultSource`` (``pyspark/sql/worker/lookup_data_sources.py``): with the
package installed, ``spark.read.format("pulsar_state")`` and SQL's
``USING pulsar_state`` work in any session, with no
``spark.dataSource.register`` call. A top-level module by Spark's rule (hence
at the repository's root), shipped by setup.py (``py_modules``); the source
itself is ``connectors/spark_source.py``.
"""

from pulsar_state.connectors.spark_source import PulsarStateDataSource as DefaultSource

__all__ = ["DefaultSource"]
