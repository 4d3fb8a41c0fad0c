"""When the local cluster's processes are ready: the questions the launcher asks them.

ZooKeeper answers ``ruok`` with ``imok``; a bookie accepts connections on its
port; a broker answers its health check (``GET /admin/v2/brokers/health``: a
message written to the bookies and read back through the broker); the cluster
lists every broker (``GET /admin/v2/brokers/{cluster}``) and has the
``public/default`` namespace. With authentication every admin call carries the
super-user's token. Every question answers ``False`` rather than raising while
the process is not there yet.
"""

from __future__ import annotations

import logging
import socket

import requests

from pulsar_state.deploy.standalone_config import LOOPBACK

__all__ = ["ClusterProbe"]

log = logging.getLogger(__name__)

_NAMESPACE = "public/default"


class ClusterProbe:
    """Readiness questions to one cluster's processes.

    Args:
        cluster_name: the Pulsar cluster's name.
        token: the super-user token (``None`` without authentication).
        timeout_s: how long one question may take.
    """

    def __init__(self, *, cluster_name: str, token: str | None, timeout_s: float = 10.0) -> None:
        self.cluster_name = cluster_name
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    # -- ZooKeeper and bookies -------------------------------------------------------

    def zookeeper_ok(self, port: int) -> bool:
        """ZooKeeper on ``port`` answers ``ruok`` with ``imok``."""
        try:
            with socket.create_connection((LOOPBACK, port), timeout=self.timeout_s) as sock:
                sock.sendall(b"ruok")
                return sock.recv(16) == b"imok"
        except OSError:
            return False

    def port_open(self, port: int) -> bool:
        """Something accepts connections on ``port`` of loopback."""
        try:
            with socket.create_connection((LOOPBACK, port), timeout=self.timeout_s):
                return True
        except OSError:
            return False

    # -- brokers ---------------------------------------------------------------------

    def _get(self, admin_url: str, path: str) -> requests.Response | None:
        try:
            return requests.get(
                f"{admin_url}{path}",
                headers=self._headers,
                timeout=self.timeout_s,
                allow_redirects=False,
            )
        except requests.RequestException:
            return None

    def broker_healthy(self, admin_url: str) -> bool:
        """The broker at ``admin_url`` passes its own health check."""
        answer = self._get(admin_url, "/admin/v2/brokers/health")
        return answer is not None and answer.status_code == 200

    def brokers(self, admin_url: str) -> list[str]:
        """The cluster's active brokers (``host:webport``) as ``admin_url`` sees them."""
        answer = self._get(admin_url, f"/admin/v2/brokers/{self.cluster_name}")
        if answer is None or answer.status_code != 200:
            return []
        try:
            listed = answer.json()
        except ValueError:
            return []
        return [str(b) for b in listed] if isinstance(listed, list) else []

    def brokers_listed(self, admin_url: str, web_ports: list[int]) -> bool:
        """Every broker of ``web_ports`` is active in the cluster."""
        listed = self.brokers(admin_url)
        return all(any(b.endswith(f":{port}") for b in listed) for port in web_ports)

    def ensure_default_namespace(self, admin_url: str) -> bool:
        """``public/default`` exists; the tenant and namespace are created when missing."""
        answer = self._get(admin_url, "/admin/v2/namespaces/public")
        if answer is None:
            return False
        try:
            if answer.status_code == 200 and _NAMESPACE in answer.json():
                return True
        except ValueError:
            return False
        try:
            if answer.status_code == 404:
                log.info("creating tenant public on cluster %s", self.cluster_name)
                requests.put(
                    f"{admin_url}/admin/v2/tenants/public",
                    json={"allowedClusters": [self.cluster_name], "adminRoles": []},
                    headers=self._headers,
                    timeout=self.timeout_s,
                )
            elif answer.status_code == 200:
                log.info("creating namespace %s", _NAMESPACE)
                requests.put(
                    f"{admin_url}/admin/v2/namespaces/{_NAMESPACE}",
                    headers=self._headers,
                    timeout=self.timeout_s,
                )
        except requests.RequestException:
            pass
        return False  # asked again on the next round

    def worker_ready(self, admin_url: str, workers: int) -> bool:
        """The functions worker at ``admin_url`` sees ``workers`` workers and lists functions."""
        members = self._get(admin_url, "/admin/v2/worker/cluster")
        if members is None or members.status_code != 200:
            return False
        try:
            if len(members.json()) < workers:
                return False
        except (ValueError, TypeError):
            return False
        functions = self._get(admin_url, f"/admin/v3/functions/{_NAMESPACE}")
        return functions is not None and functions.status_code == 200
