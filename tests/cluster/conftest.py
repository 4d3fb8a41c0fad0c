"""The local cluster suite: one real multi-broker cluster for the whole session.

``local_cluster`` is a :class:`pulsar_state.testing.EmbeddedCluster` of two
brokers and one bookie with token authentication and TLS beside the plain
listeners (a TLS client certificate authenticates too), started fresh once per
session on ``.pulsar/test-cluster`` (``PULSAR_STATE_TEST_CLUSTER_DIR`` moves
it, so that two suites on one machine each have their own) and stopped at the
end. ``make test`` runs it after everything else (the ``cluster`` marker);
``make test-cluster`` runs it alone.

``three_bookie_cluster`` is a cluster of its own (one broker, three bookies,
no authentication) for a bookie's loss, on ``<that directory>-bookies``; it
lives for its module only, which sorts first (``test_bookie_loss.py``), so
that it is stopped before ``local_cluster`` starts.

``open_cluster`` is two brokers and one bookie without authentication, on
``<that directory>-open``, started the first time a test asks for it and
stopped at the end of the session; ``either_cluster`` gives a fault test
``local_cluster``, then ``open_cluster`` (bundle unloads and kill -9 of the
owner run with and without token auth). Two clusters run at once then (about
3 GiB).

``fault_scale`` and ``fault_report`` are the fault suite's (tests/fault_report.py):
the fault runs of this tier add their rows to the report's section "On a
local cluster" (``make test-faults-cluster``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from fault_report import fault_report, fault_scale
from harness import REPO_ROOT

from pulsar_state.testing import EmbeddedCluster

__all__ = ["fault_report", "fault_scale"]  # the fault tiers' fixtures (tests/fault_report.py)

log = logging.getLogger(__name__)


def cluster_data_dir() -> Path:
    """``$PULSAR_STATE_TEST_CLUSTER_DIR``, else ``.pulsar/test-cluster`` of the checkout."""
    explicit = os.environ.get("PULSAR_STATE_TEST_CLUSTER_DIR")
    return Path(explicit) if explicit else REPO_ROOT / ".pulsar" / "test-cluster"


def _running(cluster: EmbeddedCluster, what: str) -> Iterator[EmbeddedCluster]:
    """Start ``cluster``, hand it over, stop it (a fixture's body)."""
    began = time.monotonic()
    cluster.start()
    log.info("%s ready in %.1fs: %s", what, time.monotonic() - began, cluster)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[EmbeddedCluster]:
    """Two brokers, one bookie, token auth, TLS; ``local_cluster.admin_urls[0]`` and
    ``[1]`` are the brokers' admin URLs (``tls_admin_urls``: over TLS, trusting
    ``ca_file``), ``local_cluster.superuser_token`` the super-user's token,
    ``local_cluster.client_cert()`` its TLS client certificate,
    ``local_cluster.cluster`` the :class:`LocalCluster`."""
    cluster = EmbeddedCluster(
        data_dir=cluster_data_dir(), brokers=2, bookies=1, auth="token", tls=True
    )
    yield from _running(cluster, "local cluster")


def bookies_data_dir() -> Path:
    """:func:`cluster_data_dir` with ``-bookies`` appended to its name."""
    base = cluster_data_dir()
    return base.with_name(f"{base.name}-bookies")


@pytest.fixture(scope="module")
def three_bookie_cluster() -> Iterator[EmbeddedCluster]:
    """One broker and three bookies without authentication, started fresh for the
    module and stopped after it; ``three_bookie_cluster.cluster`` kills and starts
    bookies (:meth:`LocalCluster.kill_bookie`)."""
    cluster = EmbeddedCluster(data_dir=bookies_data_dir(), brokers=1, bookies=3)
    yield from _running(cluster, "three-bookie cluster")


@pytest.fixture(scope="session")
def open_cluster() -> Iterator[EmbeddedCluster]:
    """Two brokers and one bookie without authentication (the shape users start
    with), started when a test first asks for it."""
    base = cluster_data_dir()
    cluster = EmbeddedCluster(data_dir=base.with_name(f"{base.name}-open"), brokers=2, bookies=1)
    yield from _running(cluster, "cluster without auth")


@pytest.fixture(params=["token auth", "no auth"])
def either_cluster(request: pytest.FixtureRequest) -> EmbeddedCluster:
    """:func:`local_cluster` (token auth, TLS), then :func:`open_cluster` (no auth):
    a fault test that takes it runs on both."""
    fixture = "local_cluster" if request.param == "token auth" else "open_cluster"
    return cast(EmbeddedCluster, request.getfixturevalue(fixture))
