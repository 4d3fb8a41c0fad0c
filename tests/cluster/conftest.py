"""The local cluster suite: one real multi-broker cluster for the whole session.

``local_cluster`` is a :class:`pulsar_state.testing.EmbeddedCluster` of two
brokers and one bookie with token authentication and TLS beside the plain
listeners (a TLS client certificate authenticates too), started fresh once per
session on ``.pulsar/test-cluster`` (``PULSAR_STATE_TEST_CLUSTER_DIR`` moves
it, so that two suites on one machine each have their own) and stopped at the
end. ``make test`` runs it after everything else (the ``cluster`` marker);
``make test-cluster`` runs it alone.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import REPO_ROOT

from pulsar_state.testing import EmbeddedCluster

log = logging.getLogger(__name__)


def cluster_data_dir() -> Path:
    """``$PULSAR_STATE_TEST_CLUSTER_DIR``, else ``.pulsar/test-cluster`` of the checkout."""
    explicit = os.environ.get("PULSAR_STATE_TEST_CLUSTER_DIR")
    return Path(explicit) if explicit else REPO_ROOT / ".pulsar" / "test-cluster"


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
    began = time.monotonic()
    cluster.start()
    log.info("local cluster ready in %.1fs: %s", time.monotonic() - began, cluster)
    try:
        yield cluster
    finally:
        cluster.stop()
