"""The embedded standalone's own configuration, rendered from the distribution's.

The distribution's ``conf/standalone.conf`` and ``conf/functions_worker.yml`` are
the templates: every setting keeps Pulsar's default except the ones below, which
make a small, loopback-only broker that does not clash with others on the host:

* listens on ``127.0.0.1`` only, on ports chosen by :class:`StandalonePorts`;
* a small heap and small caches (2 cores / a few GB are plenty);
* the functions worker runs Python functions with the project's interpreter
  (the launcher puts its ``bin/`` first on ``PATH``; the worker execs ``python3``)
  and keeps its downloads and logs inside the data directory.

Authentication and authorization are broker settings (``broker_settings``, e.g.
:meth:`~pulsar_state.deploy.token_auth.TokenAuthority.broker_settings`): the
worker a standalone runs takes ``authenticationEnabled``,
``authenticationProviders``, ``authorizationEnabled``, ``superUserRoles`` and
``brokerClientAuthenticationPlugin``/``Parameters`` from ``standalone.conf``,
whatever ``functions_worker.yml`` says, and its process runtime hands that
broker-client role to every function instance's Pulsar client (seen in the
worker's "Worker Configs" log line and the instances' command lines;
``tests/faults/test_functions_auth.py``).
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from pulsar_state.deploy.distribution import PulsarDistribution
from pulsar_state.deploy.errors import PortInUseError
from pulsar_state.errors import ConfigurationError

__all__ = [
    "DEFAULT_PULSAR_MEM",
    "LOOPBACK",
    "StandalonePorts",
    "free_ports",
    "merge_properties",
    "port_is_free",
    "render_functions_worker_yml",
    "render_standalone_conf",
]

LOOPBACK = "127.0.0.1"
DEFAULT_PULSAR_MEM = "-Xms256m -Xmx1g -XX:MaxDirectMemorySize=1g"

#: standalone.conf keys this project overrides (everything else stays Pulsar's).
_BROKER_SETTINGS: dict[str, str] = {
    "bindAddress": LOOPBACK,
    "advertisedAddress": LOOPBACK,
    "managedLedgerCacheSizeMB": "64",
    "dbStorage_writeCacheMaxSizeMb": "32",
    "dbStorage_readAheadCacheMaxSizeMb": "32",
    "dbStorage_rocksDB_blockCacheSize": str(16 * 1024 * 1024),
    "brokerShutdownTimeoutMs": "5000",
    # deliver new entries to caught-up consumers at once (default: poll every
    # 10 ms), which is what a state tailer waits for on every write
    "managedLedgerNewEntriesCheckDelayInMillis": "0",
    # bookie: write the journal as soon as its queue is empty (default: wait up
    # to journalMaxGroupWaitMSec=1 to group): halves a lone sync publish here
    "journalFlushWhenQueueEmpty": "true",
}


def port_is_free(port: int) -> bool:
    """Nobody listens on ``port`` of loopback right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def _free_port(taken: set[int]) -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            port = int(sock.getsockname()[1])
        if port not in taken:
            return port


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that are free on loopback right now."""
    chosen: list[int] = []
    for _ in range(count):
        chosen.append(_free_port(set(chosen)))
    return chosen


@dataclass(frozen=True, kw_only=True)
class StandalonePorts:
    """The three TCP ports of one standalone: binary protocol, HTTP, worker."""

    broker: int
    web: int
    worker: int

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or not 0 < value < 65536:
                raise ConfigurationError(f"port {name} must be 1..65535, got {value!r}")
        if len({self.broker, self.web, self.worker}) != 3:
            raise ConfigurationError(f"ports must differ, got {self}")

    @classmethod
    def pick(cls) -> StandalonePorts:
        """Three distinct ports that are free on loopback right now."""
        chosen = free_ports(3)
        return cls(broker=chosen[0], web=chosen[1], worker=chosen[2])

    @classmethod
    def from_json(cls, text: str) -> StandalonePorts:
        data = json.loads(text)
        return cls(broker=int(data["broker"]), web=int(data["web"]), worker=int(data["worker"]))

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def check_free(self) -> None:
        """Raise :class:`PortInUseError` for the first port someone else holds."""
        for purpose, port in (
            ("broker service", self.broker),
            ("web service", self.web),
            ("functions worker", self.worker),
        ):
            if not port_is_free(port):
                raise PortInUseError(port, purpose)

    @property
    def service_url(self) -> str:
        return f"pulsar://{LOOPBACK}:{self.broker}"

    @property
    def admin_url(self) -> str:
        return f"http://{LOOPBACK}:{self.web}"


def render_standalone_conf(
    dist: PulsarDistribution, ports: StandalonePorts, extra: dict[str, str] | None = None
) -> str:
    """``standalone.conf`` = the distribution's template + this project's settings."""
    settings = dict(_BROKER_SETTINGS)
    settings["brokerServicePort"] = str(ports.broker)
    settings["webServicePort"] = str(ports.web)
    settings.update(extra or {})
    return merge_properties((dist.root / "conf" / "standalone.conf").read_text(), settings)


def merge_properties(template: str, overrides: dict[str, str]) -> str:
    """A ``key=value`` config file: ``template`` with each of ``overrides`` set in
    place (its line, when the template has one uncommented) or appended."""
    settings = dict(overrides)
    lines = []
    for line in template.splitlines():
        key = line.split("=", 1)[0].strip()
        if not line.lstrip().startswith("#") and "=" in line and key in settings:
            lines.append(f"{key}={settings.pop(key)}")
        else:
            lines.append(line)
    lines.append("")
    lines.append("# --- added by pulsar-shared-state ---")
    lines.extend(f"{key}={value}" for key, value in settings.items())
    return "\n".join(lines) + "\n"


def render_functions_worker_yml(
    dist: PulsarDistribution, ports: StandalonePorts, data_dir: Path
) -> str:
    """``functions_worker.yml`` for the in-broker worker with the Python runtime."""
    template = (dist.root / "conf" / "functions_worker.yml").read_text()
    config: dict[str, Any] = yaml.safe_load(template)
    config.update(
        {
            "workerHostname": LOOPBACK,
            "workerPort": ports.worker,
            "pulsarServiceUrl": ports.service_url,
            "pulsarWebServiceUrl": ports.admin_url,
            "downloadDirectory": str(data_dir / "download"),
            "connectorsDirectory": str(dist.root / "connectors"),
            "functionsDirectory": str(dist.root / "functions"),
        }
    )
    runtime = dict(config.get("functionRuntimeFactoryConfigs") or {})
    runtime.update(
        {
            "logDirectory": str(data_dir / "logs"),
            "pythonInstanceLocation": str(dist.python_instance_main),
        }
    )
    config["functionRuntimeFactoryConfigs"] = runtime
    header = "# Rendered by pulsar-shared-state from the distribution's functions_worker.yml\n"
    return header + yaml.safe_dump(config, sort_keys=False)
