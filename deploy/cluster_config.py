"""The local cluster's configuration: its knobs, its ports, and each process's config file.

Pure: nothing here starts a process. :class:`ClusterConfig` is the validated
shape of one cluster (how many brokers and bookies, authentication, the
functions worker, TLS, heap sizes); :class:`ClusterPorts` its loopback ports,
kept for the data directory's life; the ``*_settings`` functions give the settings
each process's copy of the distribution's config overrides (everything else
stays Pulsar's), and the ``render_*`` functions write them into that copy.

Every path is absolute: ``bin/pulsar`` changes to the distribution's directory
before it starts Java, so a relative ``dataDir`` would land in the shared
distribution.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pulsar_state.deploy.cluster_tls import ClusterTls
from pulsar_state.deploy.errors import PortInUseError
from pulsar_state.deploy.standalone_config import (
    LOOPBACK,
    free_ports,
    merge_properties,
    port_is_free,
)
from pulsar_state.deploy.token_auth import TokenAuthority
from pulsar_state.errors import ConfigurationError

__all__ = [
    "AUTH_MODES",
    "TLS_PROVIDER",
    "BookiePorts",
    "BrokerPorts",
    "ClusterConfig",
    "ClusterPorts",
    "bookie_settings",
    "broker_settings",
    "functions_worker_config",
    "merge_properties",
    "render_functions_worker_yml",
    "stored_layout",
    "zookeeper_settings",
]

#: ``auth`` values :class:`ClusterConfig` takes (``None``: no authentication)
AUTH_MODES = ("token",)
#: the broker's TLS client-certificate authentication (role = the certificate's CN)
TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"
MAX_BROKERS = 5
MAX_BOOKIES = 3

#: G1 with small heaps: the distribution's default (ZGC, pre-touched 2 GB heaps)
#: multi-maps the heap and would take most of a small machine
DEFAULT_GC = "-XX:+UseG1GC -XX:MaxGCPauseMillis=50"
DEFAULT_ZOOKEEPER_MEM = "-Xms64m -Xmx256m -XX:MaxDirectMemorySize=64m"
DEFAULT_BOOKIE_MEM = "-Xms128m -Xmx256m -XX:MaxDirectMemorySize=256m"
DEFAULT_BROKER_MEM = "-Xms128m -Xmx512m -XX:MaxDirectMemorySize=256m"
#: the short-lived ``initialize-cluster-metadata`` tool
TOOL_MEM = "-Xms64m -Xmx256m"


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """The shape of one local cluster (validated at construction).

    Attributes:
        brokers: brokers to run, 1..5.
        bookies: bookies to run, 1..3; every ledger is written to all of them
            (ensemble = write quorum = ack quorum = bookies).
        auth: ``None`` (no authentication) or ``"token"`` (JWT tokens signed
            with the cluster's secret; authorization on, super-user ``admin``).
        functions: run a functions worker inside each broker.
        tls: each broker also serves TLS (``pulsar+ssl://``, ``https://``) with a
            certificate of the cluster's own CA; with ``auth="token"`` a TLS
            client certificate authenticates too (role = its common name).
        cluster_name: the Pulsar cluster's name.
        zookeeper_mem, bookie_mem, broker_mem: JVM memory flags per process kind.
        gc: JVM garbage collector flags (``PULSAR_GC``) of every process.
        start_timeout_s: how long a start waits for each step to be ready.
        broker_settings: extra ``broker.conf`` settings of every broker (they win).
        bookie_settings: extra ``bookkeeper.conf`` settings of every bookie (they
            win), e.g. ``{"journalSyncData": "true"}`` stated explicitly (the
            distribution's ``bookkeeper.conf`` already fsyncs the journal).
    """

    brokers: int = 2
    bookies: int = 1
    auth: str | None = None
    functions: bool = False
    tls: bool = False
    cluster_name: str = "local"
    zookeeper_mem: str = DEFAULT_ZOOKEEPER_MEM
    bookie_mem: str = DEFAULT_BOOKIE_MEM
    broker_mem: str = DEFAULT_BROKER_MEM
    gc: str = DEFAULT_GC
    start_timeout_s: float = 240.0
    broker_settings: dict[str, str] = field(default_factory=dict)
    bookie_settings: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _count("brokers", self.brokers, MAX_BROKERS)
        _count("bookies", self.bookies, MAX_BOOKIES)
        if self.auth is not None and self.auth not in AUTH_MODES:
            raise ConfigurationError(f"auth must be None or 'token', got {self.auth!r}")
        if not isinstance(self.functions, bool):
            raise TypeError(f"functions must be a bool, got {self.functions!r}")
        if not isinstance(self.tls, bool):
            raise TypeError(f"tls must be a bool, got {self.tls!r}")
        name = self.cluster_name
        if not isinstance(name, str) or not name or not name.replace("-", "").isalnum():
            raise ConfigurationError(f"cluster_name must be letters, digits and '-', got {name!r}")
        for label in ("zookeeper_mem", "bookie_mem", "broker_mem", "gc"):
            if not isinstance(getattr(self, label), str):
                raise TypeError(f"{label} must be a str, got {getattr(self, label)!r}")
        timeout = self.start_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ConfigurationError(f"start_timeout_s must be > 0, got {timeout!r}")
        for label in ("broker_settings", "bookie_settings"):
            extra = getattr(self, label)
            if not isinstance(extra, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in extra.items()
            ):
                raise ConfigurationError(f"{label} must map str to str, got {extra!r}")

    def layout(self) -> dict[str, Any]:
        """What a data directory's data depends on (a change needs a fresh start)."""
        return {
            "brokers": self.brokers,
            "bookies": self.bookies,
            "auth": self.auth,
            "tls": self.tls,
            "cluster_name": self.cluster_name,
        }


#: layout keys added after the first data directories were made, and what they meant then
_LAYOUT_ADDED = {"tls": False}


def stored_layout(stored: object) -> dict[str, Any] | None:
    """A layout read from ``layout.json``, with keys added since (``tls``) filled in
    as they were before, to compare with :meth:`ClusterConfig.layout`; ``None``
    when it is not a layout at all."""
    if not isinstance(stored, Mapping):
        return None
    return {**_LAYOUT_ADDED, **stored}


def _count(label: str, value: object, most: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{label} must be an int, got {value!r}")
    if not 1 <= value <= most:
        raise ConfigurationError(f"{label} must be 1..{most}, got {value}")


# -- ports ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BrokerPorts:
    """One broker's ports: the binary protocol and HTTP (admin, lookups, the worker),
    and with TLS the same over TLS (``None`` without; data directories made before
    TLS have none)."""

    service: int
    web: int
    service_tls: int | None = None
    web_tls: int | None = None

    @property
    def service_url(self) -> str:
        return f"pulsar://{LOOPBACK}:{self.service}"

    @property
    def admin_url(self) -> str:
        return f"http://{LOOPBACK}:{self.web}"

    @property
    def tls(self) -> bool:
        """Both TLS ports are there."""
        return self.service_tls is not None and self.web_tls is not None

    @property
    def tls_service_url(self) -> str | None:
        return None if self.service_tls is None else f"pulsar+ssl://{LOOPBACK}:{self.service_tls}"

    @property
    def tls_admin_url(self) -> str | None:
        return None if self.web_tls is None else f"https://{LOOPBACK}:{self.web_tls}"


@dataclass(frozen=True, kw_only=True)
class BookiePorts:
    """One bookie's ports: the bookie protocol and its Prometheus metrics."""

    bookie: int
    stats: int


@dataclass(frozen=True, kw_only=True)
class ClusterPorts:
    """Every loopback port of one cluster; all distinct."""

    zookeeper: int
    zookeeper_metrics: int
    bookies: tuple[BookiePorts, ...]
    brokers: tuple[BrokerPorts, ...]

    def __post_init__(self) -> None:
        if not self.bookies or not self.brokers:
            raise ConfigurationError("a cluster needs a bookie and a broker")
        for i, broker in enumerate(self.brokers):
            if (broker.service_tls is None) != (broker.web_tls is None):
                raise ConfigurationError(f"broker-{i} needs both TLS ports or neither")
        if len({broker.tls for broker in self.brokers}) != 1:
            raise ConfigurationError("every broker serves TLS or none does")
        ports = self.named()
        for purpose, port in ports:
            if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
                raise ConfigurationError(f"port of {purpose} must be 1..65535, got {port!r}")
        if len({port for _, port in ports}) != len(ports):
            raise ConfigurationError(f"ports must differ, got {ports}")

    def named(self) -> list[tuple[str, int]]:
        """(purpose, port) of every port."""
        out = [("zookeeper", self.zookeeper), ("zookeeper metrics", self.zookeeper_metrics)]
        for i, bookie in enumerate(self.bookies):
            out += [(f"bookie-{i}", bookie.bookie), (f"bookie-{i} metrics", bookie.stats)]
        for i, broker in enumerate(self.brokers):
            out += [(f"broker-{i} service", broker.service), (f"broker-{i} web", broker.web)]
            if broker.service_tls is not None and broker.web_tls is not None:
                out += [
                    (f"broker-{i} service TLS", broker.service_tls),
                    (f"broker-{i} web TLS", broker.web_tls),
                ]
        return out

    @property
    def tls(self) -> bool:
        """The brokers serve TLS too."""
        return self.brokers[0].tls

    @classmethod
    def pick(cls, *, brokers: int, bookies: int, tls: bool = False) -> ClusterPorts:
        """Ports that are free on loopback right now, all distinct (``tls``: with
        each broker's two TLS ports)."""
        per_broker = 4 if tls else 2
        ports = iter(free_ports(2 + 2 * bookies + per_broker * brokers))

        def broker() -> BrokerPorts:
            service, web = next(ports), next(ports)
            if not tls:
                return BrokerPorts(service=service, web=web)
            return BrokerPorts(
                service=service, web=web, service_tls=next(ports), web_tls=next(ports)
            )

        return cls(
            zookeeper=next(ports),
            zookeeper_metrics=next(ports),
            bookies=tuple(
                BookiePorts(bookie=next(ports), stats=next(ports)) for _ in range(bookies)
            ),
            brokers=tuple(broker() for _ in range(brokers)),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> ClusterPorts:
        data = json.loads(text)
        return cls(
            zookeeper=int(data["zookeeper"]),
            zookeeper_metrics=int(data["zookeeper_metrics"]),
            bookies=tuple(BookiePorts(**b) for b in data["bookies"]),
            brokers=tuple(BrokerPorts(**b) for b in data["brokers"]),
        )

    def check_free(self) -> None:
        """Raise :class:`PortInUseError` for the first port someone else holds."""
        for purpose, port in self.named():
            if not port_is_free(port):
                raise PortInUseError(port, purpose)

    @property
    def metadata_store_url(self) -> str:
        return f"zk:{LOOPBACK}:{self.zookeeper}"


# -- settings -------------------------------------------------------------------------


def zookeeper_settings(ports: ClusterPorts, data_dir: Path) -> dict[str, str]:
    """``zookeeper.conf`` overrides: loopback, this cluster's ports and data."""
    return {
        "dataDir": str(data_dir / "data" / "zookeeper"),
        "clientPort": str(ports.zookeeper),
        "clientPortAddress": LOOPBACK,
        "admin.enableServer": "false",
        "metricsProvider.httpHost": LOOPBACK,
        "metricsProvider.httpPort": str(ports.zookeeper_metrics),
    }


def bookie_settings(
    ports: ClusterPorts, index: int, data_dir: Path, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``bookkeeper.conf`` overrides of bookie ``index``: loopback, small caches,
    then ``extra`` (:attr:`ClusterConfig.bookie_settings`, which wins)."""
    own = ports.bookies[index]
    home = data_dir / "data" / f"bookie-{index}"
    settings = {
        "bookiePort": str(own.bookie),
        "advertisedAddress": LOOPBACK,
        "allowLoopback": "true",
        "journalDirectory": str(home / "journal"),
        "ledgerDirectories": str(home / "ledgers"),
        "metadataServiceUri": f"metadata-store:{ports.metadata_store_url}",
        "zkServers": f"{LOOPBACK}:{ports.zookeeper}",
        "prometheusStatsHttpAddress": LOOPBACK,
        "prometheusStatsHttpPort": str(own.stats),
        "httpServerEnabled": "false",
        "autoRecoveryDaemonEnabled": "false",
        "dbStorage_writeCacheMaxSizeMb": "32",
        "dbStorage_readAheadCacheMaxSizeMb": "32",
        "dbStorage_rocksDB_blockCacheSize": str(16 * 1024 * 1024),
        "journalPreAllocSizeMB": "4",
        # write the journal as soon as its queue is empty (see standalone_config)
        "journalFlushWhenQueueEmpty": "true",
    }
    settings.update(extra or {})
    return settings


def broker_settings(
    config: ClusterConfig,
    ports: ClusterPorts,
    index: int,
    authority: TokenAuthority | None = None,
    tls: ClusterTls | None = None,
) -> dict[str, str]:
    """``broker.conf`` overrides of broker ``index``.

    Loopback, its own ports, the cluster's ZooKeeper as both metadata stores,
    every ledger on every bookie, inactive topics kept (a state topic may have
    only readers), authentication when ``authority`` is given (the brokers'
    own client then authenticates as the super-user: brokers talk to each
    other), and ``config.broker_settings`` last. With ``config.tls`` the
    broker also serves TLS on its TLS ports with ``tls``'s certificate, trusts
    the cluster's CA, and under authentication takes a TLS client certificate
    too; its plain ports stay (the brokers' own traffic and the launcher's
    readiness checks use them).

    Raises:
        ConfigurationError: ``config.tls`` without TLS ports or without ``tls``.
    """
    own = ports.brokers[index]
    settings = {
        "clusterName": config.cluster_name,
        "metadataStoreUrl": ports.metadata_store_url,
        "configurationMetadataStoreUrl": ports.metadata_store_url,
        "brokerServicePort": str(own.service),
        "webServicePort": str(own.web),
        "bindAddress": LOOPBACK,
        "advertisedAddress": LOOPBACK,
        "managedLedgerDefaultEnsembleSize": str(config.bookies),
        "managedLedgerDefaultWriteQuorum": str(config.bookies),
        "managedLedgerDefaultAckQuorum": str(config.bookies),
        "brokerDeleteInactiveTopicsEnabled": "false",
        "managedLedgerCacheSizeMB": "64",
        "brokerShutdownTimeoutMs": "5000",
        # deliver new entries to caught-up consumers at once (see standalone_config)
        "managedLedgerNewEntriesCheckDelayInMillis": "0",
        "functionsWorkerEnabled": str(config.functions).lower(),
    }
    if config.tls:
        settings.update(_tls_settings(own, tls))
    if authority is not None:
        settings.update(authority.broker_settings())
        if config.tls:
            providers = settings["authenticationProviders"]
            settings["authenticationProviders"] = f"{TLS_PROVIDER},{providers}"
    settings.update(config.broker_settings)
    return settings


def _tls_settings(own: BrokerPorts, tls: ClusterTls | None) -> dict[str, str]:
    if own.service_tls is None or own.web_tls is None:
        raise ConfigurationError("a TLS cluster needs each broker's TLS ports")
    if tls is None:
        raise ConfigurationError("a TLS cluster needs its certificates")
    return {
        "brokerServicePortTls": str(own.service_tls),
        "webServicePortTls": str(own.web_tls),
        "tlsCertificateFilePath": str(tls.cert_file),
        "tlsKeyFilePath": str(tls.key_file),
        "tlsTrustCertsFilePath": str(tls.ca_file),
    }


def functions_worker_config(
    template: dict[str, Any],
    config: ClusterConfig,
    ports: ClusterPorts,
    index: int,
    *,
    data_dir: Path,
    python_instance: Path,
    distribution_root: Path,
    authority: TokenAuthority | None = None,
) -> dict[str, Any]:
    """``functions_worker.yml`` of the worker inside broker ``index``.

    The worker listens on its broker's web port, stores function code on the
    bookies (one replica per bookie), runs Python functions as processes (the
    launcher puts the interpreter's ``bin/`` first on ``PATH``) and keeps its
    downloads and logs under ``data_dir``. With ``authority`` it checks tokens
    (and under TLS client certificates) as its broker does; list-typed
    settings are YAML lists.
    """
    own = ports.brokers[index]
    worker = dict(template)
    worker.update(
        {
            "workerId": f"{config.cluster_name}-broker-{index}",
            "workerHostname": LOOPBACK,
            "workerPort": own.web,
            "pulsarServiceUrl": own.service_url,
            "pulsarWebServiceUrl": own.admin_url,
            "pulsarFunctionsCluster": config.cluster_name,
            "configurationMetadataStoreUrl": ports.metadata_store_url,
            "numFunctionPackageReplicas": config.bookies,
            "downloadDirectory": str(data_dir / "download" / f"broker-{index}"),
            "connectorsDirectory": str(distribution_root / "connectors"),
            "functionsDirectory": str(distribution_root / "functions"),
        }
    )
    runtime = dict(worker.get("functionRuntimeFactoryConfigs") or {})
    runtime.update(
        {
            "logDirectory": str(data_dir / "logs" / f"functions-broker-{index}"),
            "pythonInstanceLocation": str(python_instance),
        }
    )
    worker["functionRuntimeFactoryConfigs"] = runtime
    if authority is not None:
        secret = base64.b64encode(authority.secret).decode()
        client = {
            "brokerClientAuthenticationPlugin": (
                "org.apache.pulsar.client.impl.auth.AuthenticationToken"
            ),
            "brokerClientAuthenticationParameters": f"token:{authority.superuser_token}",
        }
        providers = ["org.apache.pulsar.broker.authentication.AuthenticationProviderToken"]
        worker.update(
            {
                "authenticationEnabled": True,
                "authenticationProviders": [TLS_PROVIDER, *providers] if config.tls else providers,
                "authorizationEnabled": True,
                "superUserRoles": [authority.superuser],
                "properties": {"tokenSecretKey": f"data:;base64,{secret}"},
                **client,
                "clientAuthenticationPlugin": client["brokerClientAuthenticationPlugin"],
                "clientAuthenticationParameters": client["brokerClientAuthenticationParameters"],
            }
        )
    return worker


def render_functions_worker_yml(config: dict[str, Any]) -> str:
    """The worker's config as YAML (lists stay lists)."""
    header = "# Rendered by pulsar-shared-state from the distribution's functions_worker.yml\n"
    return header + yaml.safe_dump(config, sort_keys=False)
