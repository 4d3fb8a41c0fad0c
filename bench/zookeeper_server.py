"""ZooKeeper 3.8 (Debian ``zookeeper``) standalone on loopback, self-contained.

Debian's ``zkEnv.sh`` insists on ``/etc/zookeeper/conf`` and ``/var/log``; this
starts ``QuorumPeerMain`` directly with a private ``zoo.cfg`` instead (the
jar's manifest carries its own class path). Defaults kept: the transaction log
is fsynced before a commit is acknowledged (``forceSync=yes``, written out in
the ``zoo.cfg``), 2 s ticks.
"""

from __future__ import annotations

import socket

from bench.local_server import LocalServer, ensure_package

JAR = "/usr/share/java/zookeeper.jar"
LOGGER_JAR = "/usr/share/java/slf4j-nop.jar"


class ZooKeeperServer(LocalServer):
    name = "zookeeper"

    def prepare(self) -> None:
        ensure_package("zookeeper", JAR)

    def prepare_data(self) -> None:
        self.config = self.data_dir / "zoo.cfg"
        self.config.write_text(
            "\n".join(
                [
                    "tickTime=2000",
                    f"dataDir={self.data_dir / 'data'}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok",
                    "maxClientCnxns=0",
                    "forceSync=yes",  # the default, stated: fsync the log on every commit
                ]
            )
            + "\n"
        )

    def command(self) -> list[str]:
        return [
            "java",
            "-Xmx512m",
            "-cp",
            f"{JAR}:{LOGGER_JAR}",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self.config),
        ]

    def ready(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
