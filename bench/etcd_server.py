"""etcd (Debian ``etcd-server``) as a single-member cluster on loopback.

Defaults of the package are kept where they matter for a fair comparison: the
WAL is fsynced on every commit (etcd cannot turn that off), snapshots every
100,000 entries, no auto-compaction of history.
"""

from __future__ import annotations

from bench.local_server import LocalServer, ensure_package, free_port


class EtcdServer(LocalServer):
    name = "etcd"

    def prepare(self) -> None:
        ensure_package("etcd-server", "etcd")
        self.peer_port = free_port()

    def command(self) -> list[str]:
        client = f"http://127.0.0.1:{self.port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            "etcd",
            "--name=bench",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=bench={peer}",
            "--initial-cluster-state=new",
            "--quota-backend-bytes=8589934592",
            "--log-level=warn",
        ]
