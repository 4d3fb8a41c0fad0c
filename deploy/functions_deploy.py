"""Deploy the packaged functions onto any cluster (``pulsar-state deploy|undeploy|package``,
whose options are in :mod:`pulsar_state.cli.deploy`).

Each function has a config file in ``deploy/functions/*.yaml`` (the format of
``pulsar-admin functions create --function-config-file``) and a single-file
entry point in ``functions/*_entry.py`` (the SQL sink's: ``connectors/sink_entry.py``)
that imports the package. ``deploy``
sends each function as a self-contained zip (``pulsar-state package``, see
:mod:`~pulsar_state.deploy.function_package`), so workers need nothing but
Pulsar's Python runtime; ``--code entry`` sends only the entry file, for
workers whose Python has ``pulsar-shared-state`` installed.

The shipped configs leave out what depends on the cluster: ``deploy`` fills in
``userConfig.adminUrl`` (the functions protect their state topics through it:
infinite retention, no inactive deletion) with ``--function-admin-url``, by
default the ``--admin-url`` it deploys to, unless the config sets one. Then it
waits until every function's instances run and its inputs show its
subscription, so what is sent next is seen.

``--admin-client rest`` (the default) talks to the admin REST API itself
(:mod:`~pulsar_state.deploy.rest_admin`: multipart upload as ``pulsar-admin``
does), so deploying needs no Java and no Pulsar distribution; ``cli`` runs the
distribution's ``bin/pulsar-admin``. Both take the same ``--auth-*`` and
``--tls-*`` options (:func:`~pulsar_state.cli.options.auth_options`). The
functions' own admin calls authenticate with the function secret
``adminToken`` (:mod:`~pulsar_state.runtime.secrets`), which ``deploy``
fills in from ``--function-auth-token`` (default: the token it deploys with)
unless the config's ``secrets`` set it.
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import yaml

from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.deploy.errors import PulsarAdminError
from pulsar_state.deploy.function_package import build_function_package
from pulsar_state.deploy.function_ready import DeployedFunction
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.deploy.rest_admin import PulsarAdminRest
from pulsar_state.errors import ConfigurationError
from pulsar_state.runtime.secrets import ADMIN_TOKEN_SECRET
from pulsar_state.runtime.tls import TLS_TRUST_CERTS

__all__ = [
    "ADMIN_CLIENTS",
    "FUNCTIONS",
    "build_packages",
    "deploy_functions",
    "render_config",
    "undeploy_functions",
]

log = logging.getLogger(__name__)

#: config file (deploy/functions/) -> (entry file (see _entry), extras it needs)
FUNCTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "metadata-manager.yaml": ("metadata_manager_entry.py", ()),
    "wordcount.yaml": ("wordcount_entry.py", ()),
    "sql-sink.yaml": ("sink_entry.py", ("postgres",)),  # PostgreSQL by URL
    "scheduler.yaml": ("scheduler_entry.py", ()),
}


#: how pulsar-admin says a function is not there ("doesn't exist", "does not exist")
_MISSING = re.compile(r"does(n't| not) exist|not found", re.IGNORECASE)


def _config_dir() -> Path:
    return Path(str(resources.files("pulsar_state.deploy") / "functions"))


#: where the entry files are: the functions' in functions/, the SQL sink's in connectors/
_ENTRY_PACKAGES = ("pulsar_state.functions", "pulsar_state.connectors")


def _entry(name: str) -> Path:
    """The entry file ``name`` (a missing one is reported by the packaging, as before)."""
    found = [Path(str(resources.files(package) / name)) for package in _ENTRY_PACKAGES]
    return next((path for path in found if path.is_file()), found[0])


def _load(config_file: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((_config_dir() / config_file).read_text())
    return data


def render_config(
    config: dict[str, Any],
    *,
    admin_url: str,
    admin_token: str | None = None,
    admin_tls_trust_cert_path: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The config ``deploy`` sends: the shipped one with what the cluster decides filled in.

    Returns the config and the keys that were filled. A value the config sets
    is kept; ``userConfig.adminUrl`` is the admin URL the functions reach the
    cluster by (without it the SQL sink refuses every record and the others
    leave their state topics unprotected); ``secrets.adminToken`` (when
    ``admin_token`` is given) is the token they authenticate those calls with;
    ``userConfig.tlsTrustCertsFilePath`` (when ``admin_tls_trust_cert_path`` is
    given: a path on the workers) the CA file they trust for an ``https://`` one.
    """
    if not admin_url.startswith(("http://", "https://")):
        raise ConfigurationError(
            f"the functions' admin URL must be http(s)://..., got {admin_url!r}"
        )
    user = dict(config.get("userConfig") or {})
    filled = []
    if not user.get("adminUrl"):
        user["adminUrl"] = admin_url
        filled.append(f"userConfig.adminUrl={admin_url}")
    if admin_tls_trust_cert_path and not user.get(TLS_TRUST_CERTS):
        user[TLS_TRUST_CERTS] = admin_tls_trust_cert_path
        filled.append(f"userConfig.{TLS_TRUST_CERTS}={admin_tls_trust_cert_path}")
    rendered = {**config, "userConfig": user}
    secrets = dict(config.get("secrets") or {})
    if admin_token and not secrets.get(ADMIN_TOKEN_SECRET):
        secrets[ADMIN_TOKEN_SECRET] = admin_token
        rendered["secrets"] = secrets
        filled.append(f"secrets.{ADMIN_TOKEN_SECRET} (the function auth token)")
    return rendered, filled


#: the admin clients: rest (the admin REST API, no Java) or cli (bin/pulsar-admin)
ADMIN_CLIENTS = ("rest", "cli")

Echo = Callable[[str], None]

Fqn = tuple[str, str, str]


class _Admin(Protocol):
    """What deploy and undeploy do on a cluster, by either admin client."""

    def exists(self, fqn: Fqn) -> bool: ...

    def create(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None: ...

    def update(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None: ...

    def delete(self, fqn: Fqn) -> bool: ...

    def delete_packages(self, fqn: Fqn) -> None: ...

    def close(self) -> None: ...


class _CliAdmin:
    """``bin/pulsar-admin`` (needs Java and the distribution)."""

    def __init__(self, admin_url: str, auth: ClusterAuth) -> None:
        self.cli = PulsarAdminCli(admin_url=admin_url, auth=auth)

    def exists(self, fqn: Fqn) -> bool:
        try:
            self.cli.function_status(fqn)
        except PulsarAdminError as exc:
            if _MISSING.search(exc.output):
                return False
            raise
        return True

    def create(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None:
        self.cli.create_function(fqn=fqn, config_file=config_file, py=code)

    def update(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None:
        self.cli.run(
            "functions", "update", "--function-config-file", str(config_file), "--py", str(code)
        )

    def delete(self, fqn: Fqn) -> bool:
        try:
            self.cli.delete_function(fqn)
        except PulsarAdminError as exc:
            if _MISSING.search(exc.output):
                return False
            raise
        return True

    def delete_packages(self, fqn: Fqn) -> None:
        """Delete the code packages the worker stored for ``fqn``.

        Pulsar 4.0's worker keeps ``function://tenant/ns/name@<version>`` after
        ``functions delete``, and a later ``functions create`` of the same name
        then fails ("Package ... metadata already exists"): an undeploy that
        leaves them behind could never be followed by a deploy.
        """
        url = "function://" + "/".join(fqn)
        try:
            versions = self.cli.run("packages", "list-versions", url).split()
        except PulsarAdminError as exc:  # none stored, or no package management
            log.debug("no packages for %s: %s", url, exc.output.strip()[-200:])
            return
        for version in versions:
            try:
                self.cli.run("packages", "delete", f"{url}@{version}")
            except PulsarAdminError as exc:
                log.warning("could not delete %s@%s: %s", url, version, exc.output.strip()[-200:])

    def close(self) -> None:
        pass


class _RestAdmin:
    """The admin REST API (:class:`PulsarAdminRest`): no Java, no distribution."""

    def __init__(self, admin_url: str, auth: ClusterAuth) -> None:
        self.rest = PulsarAdminRest.with_auth(admin_url, auth)

    def exists(self, fqn: Fqn) -> bool:
        return self.rest.function_exists(fqn)

    def create(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None:
        self.rest.create_function(fqn=fqn, config=config, code=code)

    def update(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None:
        self.rest.update_function(fqn=fqn, config=config, code=code)

    def delete(self, fqn: Fqn) -> bool:
        return self.rest.delete_function(fqn)

    def delete_packages(self, fqn: Fqn) -> None:
        self.rest.delete_packages(fqn)

    def close(self) -> None:
        self.rest.close()


def _admin(kind: str, admin_url: str, auth: ClusterAuth) -> _Admin:
    """The admin client ``kind`` (see :data:`ADMIN_CLIENTS`); PulsarStateError if unusable
    (no Java or distribution for cli, a bad URL)."""
    if kind not in ADMIN_CLIENTS:
        raise ConfigurationError(f"admin client: one of {', '.join(ADMIN_CLIENTS)}, got {kind!r}")
    return _RestAdmin(admin_url, auth) if kind == "rest" else _CliAdmin(admin_url, auth)


def _fqn(config_file: str) -> Fqn:
    """The fully qualified name a shipped config deploys."""
    config = _load(config_file)
    return (config["tenant"], config["namespace"], config["name"])


def build_packages(
    out_dir: Path, python_version: str | None, platform: str | None
) -> Iterator[tuple[str, Path]]:
    """Build each function's zip into ``out_dir``: (config file, zip)."""
    for config_file, (entry, extras) in FUNCTIONS.items():
        zip_path = build_function_package(
            name=_load(config_file)["name"],
            entry=_entry(entry),
            out_dir=out_dir,
            extras=extras,
            python_version=python_version,
            platform=platform,
        )
        yield config_file, zip_path


def deploy_functions(
    *,
    admin_url: str,
    auth: ClusterAuth,
    admin_client: str = "rest",
    code: str = "zip",
    function_admin_url: str | None = None,
    function_auth_token: str | None = None,
    function_tls_trust_cert_path: str | None = None,
    wait_s: float = 300.0,
    python_version: str | None = None,
    platform: str | None = None,
    echo: Echo = print,
) -> None:
    """Create the packaged functions on the cluster, or update those already there.

    ``code``: ``zip`` (a self-contained package each, see :func:`build_packages`)
    or ``entry`` (only the entry file). Each config is filled in
    (:func:`render_config`) with ``function_admin_url`` (default ``admin_url``)
    and ``function_auth_token`` (default ``auth``'s token), and
    ``function_tls_trust_cert_path`` (no default: a path on the workers). Then, unless
    ``wait_s`` is 0, waits until every function runs and is subscribed to its
    inputs. ``echo`` is told each step. Raises PulsarStateError (a failed
    admin call, a function not ready in time) or ConfigurationError.
    """
    if code not in ("zip", "entry"):
        raise ConfigurationError(f"code: zip or entry, got {code!r}")
    admin = _admin(admin_client, admin_url, auth)
    deployed: list[tuple[Fqn, dict[str, Any]]] = []
    try:
        # asked before anything is built (the slow part): a cluster that refuses
        # (a wrong token, no permission, no functions worker) says so at once
        existing = {fqn: admin.exists(fqn) for fqn in map(_fqn, FUNCTIONS)}
        with tempfile.TemporaryDirectory(prefix="pss-deploy-") as tmp:
            if code == "zip":
                targets = list(build_packages(Path(tmp), python_version, platform))
            else:
                targets = [
                    (config_file, _entry(entry)) for config_file, (entry, _) in FUNCTIONS.items()
                ]
            for config_file, py in targets:
                config, filled = render_config(
                    _load(config_file),
                    admin_url=function_admin_url or admin_url,
                    admin_token=function_auth_token or auth.token(),
                    admin_tls_trust_cert_path=function_tls_trust_cert_path,
                )
                fqn = (config["tenant"], config["namespace"], config["name"])
                path = Path(tmp) / config_file  # what is sent: the shipped file, filled in
                path.write_text(yaml.safe_dump(config, sort_keys=False))
                if filled:
                    echo(f"{'/'.join(fqn)}: {', '.join(filled)}")
                deployed.append((fqn, config))
                if existing[fqn] if fqn in existing else admin.exists(fqn):
                    admin.update(fqn, config, path, py)
                    echo(f"updated {'/'.join(fqn)}")
                    continue
                admin.delete_packages(fqn)  # left by an earlier delete of the same name
                admin.create(fqn, config, path, py)
                echo(f"created {'/'.join(fqn)}")
    finally:
        admin.close()
    if wait_s > 0:
        _wait_ready(admin_url, deployed, wait_s, auth, echo)


def _wait_ready(
    admin_url: str,
    deployed: list[tuple[Fqn, dict[str, Any]]],
    wait_s: float,
    auth: ClusterAuth,
    echo: Echo,
) -> None:
    """Every function running and subscribed to its inputs, or a clear error."""
    for fqn, config in deployed:
        inputs = list(config.get("inputs") or [])
        with DeployedFunction(
            admin=auth.admin_endpoint(admin_url),
            fqn=fqn,
            subscription=config.get("subName"),
        ) as function:
            function.wait_ready(
                inputs=inputs, instances=int(config.get("parallelism", 1)), timeout_s=wait_s
            )
        echo(f"ready {function.name}: running, subscribed to {', '.join(inputs)}")


def undeploy_functions(
    *, admin_url: str, auth: ClusterAuth, admin_client: str = "rest", echo: Echo = print
) -> None:
    """Delete the packaged functions (and their stored code) from the cluster.

    A function that is not deployed is told to ``echo``, not an error.
    """
    admin = _admin(admin_client, admin_url, auth)
    try:
        for config_file in FUNCTIONS:
            fqn = _fqn(config_file)
            if admin.delete(fqn):
                echo(f"deleted {'/'.join(fqn)}")
            else:
                echo(f"{'/'.join(fqn)} was not deployed")
            admin.delete_packages(fqn)
    finally:
        admin.close()
