"""What a running local cluster is and where to reach it: :class:`ClusterInfo`.

:class:`~pulsar_state.deploy.cluster.LocalCluster` writes one into the data
directory's ``cluster.json`` when the cluster is up, and ``status`` reads it
back from any process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ClusterInfo"]


@dataclass(frozen=True, kw_only=True)
class ClusterInfo:
    """What a running local cluster is and where to reach it.

    Attributes:
        cluster_name: the Pulsar cluster's name.
        service_urls: each broker's ``pulsar://`` URL, broker 0 first.
        admin_urls: each broker's ``http://`` admin URL, broker 0 first.
        superuser_token: the super-user's (``admin``) token; ``None`` without auth.
        token_file: the file holding that token; ``None`` without auth.
        data_dir: the cluster's data directory.
        version: the Pulsar version it runs.
        functions: whether a functions worker runs inside each broker.
        started_at: when it was started (wall clock, seconds).
        tls_service_urls: each broker's ``pulsar+ssl://`` URL; empty without TLS.
        tls_admin_urls: each broker's ``https://`` admin URL; empty without TLS.
        ca_file: the CA certificate that signs the brokers' (and clients')
            certificates, for ``tls_trust_certs_file_path``; ``None`` without TLS.
    """

    cluster_name: str
    service_urls: tuple[str, ...]
    admin_urls: tuple[str, ...]
    superuser_token: str | None
    token_file: str | None
    data_dir: str
    version: str
    functions: bool
    started_at: float
    tls_service_urls: tuple[str, ...] = ()
    tls_admin_urls: tuple[str, ...] = ()
    ca_file: str | None = None

    @property
    def service_url(self) -> str:
        """One service URL naming every broker (``pulsar://h:p1,h:p2``), as clients take it."""
        hosts = [url.removeprefix("pulsar://") for url in self.service_urls]
        return "pulsar://" + ",".join(hosts)

    @property
    def tls_service_url(self) -> str | None:
        """One ``pulsar+ssl://h:p1,h:p2`` URL naming every broker; ``None`` without TLS."""
        if not self.tls_service_urls:
            return None
        hosts = [url.removeprefix("pulsar+ssl://") for url in self.tls_service_urls]
        return "pulsar+ssl://" + ",".join(hosts)

    def describe(self) -> str:
        """``key=value`` lines: each broker's URLs, all brokers' service URL, the token
        file; with TLS each broker's TLS URLs, all brokers' TLS service URL, the CA file."""
        lines = [f"cluster={self.cluster_name}"]
        tls = self.tls_service_urls and self.tls_admin_urls
        for i, (service, admin) in enumerate(zip(self.service_urls, self.admin_urls, strict=True)):
            lines += [f"broker.{i}.service_url={service}", f"broker.{i}.admin_url={admin}"]
            if tls:
                lines += [
                    f"broker.{i}.tls_service_url={self.tls_service_urls[i]}",
                    f"broker.{i}.tls_admin_url={self.tls_admin_urls[i]}",
                ]
        lines += [f"service_url={self.service_url}", f"admin_url={self.admin_urls[0]}"]
        if tls:
            lines += [
                f"tls_service_url={self.tls_service_url}",
                f"tls_admin_url={self.tls_admin_urls[0]}",
            ]
        if self.ca_file:
            lines.append(f"ca_file={self.ca_file}")
        if self.token_file:
            lines.append(f"token_file={self.token_file}")
        return "\n".join(lines)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterInfo:
        """From :func:`dataclasses.asdict` (``cluster.json``; one written before TLS too)."""
        return cls(
            **{
                **data,
                "service_urls": tuple(data["service_urls"]),
                "admin_urls": tuple(data["admin_urls"]),
                "tls_service_urls": tuple(data.get("tls_service_urls") or ()),
                "tls_admin_urls": tuple(data.get("tls_admin_urls") or ()),
            }
        )
