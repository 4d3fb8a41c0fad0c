"""The project's Prometheus metrics in a function instance, labelled with the instance.

A Python function instance serves ``prometheus_client``'s default registry on
its own metrics port, and the functions worker gathers every instance's
metrics into its ``/metrics``. The state core's metrics (``pulsar_state_*``)
and the sink's (``pulsar_state_sink_*``) are labelled by topic only, so two
instances of one function writing the same topic would publish the same
series. :func:`label_instance_metrics` re-registers them, once per process,
behind a collector that adds the labels the runtime puts on its own metrics:
``tenant``, ``namespace``, ``name``, ``instance_id`` and ``fqfn``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from pulsar_state import metrics as core_metrics

__all__ = ["InstanceLabels", "label_instance_metrics", "unlabel_instance_metrics"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_labelled: list[InstanceLabels] = []


class InstanceLabels(Collector):
    """Collects ``collectors`` with ``labels`` added to every sample."""

    def __init__(self, collectors: Iterable[Collector], labels: dict[str, str]) -> None:
        self.collectors = list(collectors)
        self.labels = dict(labels)

    def collect(self) -> Iterator[Metric]:
        for collector in self.collectors:
            for family in collector.collect():  # a fresh family per call: ours to change
                family.samples = [
                    sample._replace(labels={**self.labels, **sample.labels})
                    for sample in family.samples
                ]
                yield family


def label_instance_metrics(
    context: Any, *, extra: Iterable[Collector] = (), registry: CollectorRegistry = REGISTRY
) -> InstanceLabels | None:
    """Label this process's project metrics with the instance ``context`` runs (once).

    The state core's metrics (:mod:`pulsar_state.metrics`) and ``extra`` ones (a
    connector's own). Returns the collector now registered, or ``None`` when an
    earlier call already did it (one instance per process: the runtime's rule).
    A failure is logged, never raised: metrics never stop a function.
    """
    with _lock:
        if _labelled:
            return None
        tenant = str(context.get_function_tenant())
        namespace = str(context.get_function_namespace())
        name = str(context.get_function_name())
        labels = {  # as the runtime labels its own (its namespace label is tenant/namespace)
            "tenant": tenant,
            "namespace": f"{tenant}/{namespace}",
            "name": name,
            "instance_id": str(context.get_instance_id()),
            "fqfn": f"{tenant}/{namespace}/{name}",
        }
        core = (getattr(core_metrics, n) for n in core_metrics.__all__)
        collectors: list[Collector] = [c for c in core if isinstance(c, MetricWrapperBase)]
        collectors += extra
        try:
            for collector in collectors:
                registry.unregister(collector)
            labelled = InstanceLabels(collectors, labels)
            registry.register(labelled)
        except (KeyError, ValueError):
            log.exception("could not label the metrics with the function instance")
            return None
        _labelled.append(labelled)
        return labelled


def unlabel_instance_metrics(registry: CollectorRegistry = REGISTRY) -> None:
    """Undo :func:`label_instance_metrics`: the metrics are plain again.

    For a process that hosts more than one function's code in turn (a test
    session running functions in-process); a worker's instance never needs it.
    """
    with _lock:
        for labelled in _labelled:
            registry.unregister(labelled)
            for collector in labelled.collectors:
                registry.register(collector)
        _labelled.clear()
