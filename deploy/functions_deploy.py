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

import json
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
from pulsar_state.errors import ConfigurationError, InvalidTopicNameError
from pulsar_state.runtime.secrets import ADMIN_TOKEN_SECRET
from pulsar_state.runtime.tls import TLS_TRUST_CERTS
from pulsar_state.topic_names import PERSISTENT, namespace_topic, parse_topic

__all__ = [
    "ADMIN_CLIENTS",
    "FUNCTIONS",
    "build_packages",
    "deploy_functions",
    "function_names",
    "load_configs",
    "relocate",
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


def _unless_missing(call: Callable[[], object]) -> bool:
    """Run a pulsar-admin call about one function.

    Returns:
        ``True`` when it succeeds, ``False`` when pulsar-admin says the function
        is not there (:data:`_MISSING`).

    Raises:
        PulsarAdminError: any other failure of the call.
    """
    try:
        call()
    except PulsarAdminError as exc:
        if _MISSING.search(exc.output):
            return False
        raise
    return True


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
    admin_token_secret: Any = None,
    admin_tls_trust_cert_path: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The config ``deploy`` sends: the shipped one with what the cluster decides filled in.

    Returns the config and the keys that were filled. A value the config sets
    is kept; ``userConfig.adminUrl`` is the admin URL the functions reach the
    cluster by (without it the SQL sink refuses every record and the others
    leave their state topics unprotected); ``secrets.adminToken`` (when
    ``admin_token`` is given) is the token they authenticate those calls with, or
    (``admin_token_secret``) a reference to it as the cluster's secrets provider
    takes one (for Kubernetes ``{"path": ..., "key": ...}``);
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
    if admin_token and admin_token_secret is not None:
        raise ConfigurationError("give the functions' admin token or a secret reference, not both")
    if admin_token and not secrets.get(ADMIN_TOKEN_SECRET):
        secrets[ADMIN_TOKEN_SECRET] = admin_token
        rendered["secrets"] = secrets
        filled.append(f"secrets.{ADMIN_TOKEN_SECRET} (the function auth token)")
    elif admin_token_secret is not None and not secrets.get(ADMIN_TOKEN_SECRET):
        secrets[ADMIN_TOKEN_SECRET] = admin_token_secret
        rendered["secrets"] = secrets
        filled.append(f"secrets.{ADMIN_TOKEN_SECRET}={json.dumps(admin_token_secret)}")
    return rendered, filled


def relocate(
    config: dict[str, Any], *, tenant: str | None, namespace: str | None
) -> dict[str, Any]:
    """``config`` moved to ``tenant``/``namespace``: the function, and every topic
    of its own namespace it names (inputs, output, the topics in userConfig)."""
    if tenant is None and namespace is None:
        return config
    old = (config["tenant"], config["namespace"])
    new_tenant, new_ns = tenant or config["tenant"], namespace or config["namespace"]
    for name, value in (("tenant", new_tenant), ("namespace", new_ns)):
        if not value or "/" in value:
            raise ConfigurationError(f"{name} must be a plain name, got {value!r}")

    def move(value: Any) -> Any:
        if isinstance(value, str) and value.startswith(f"{PERSISTENT}://"):
            try:
                parsed = parse_topic(value)
            except InvalidTopicNameError:
                return value
            if (parsed.tenant, parsed.namespace) == old:
                return namespace_topic(new_tenant, new_ns, parsed.local_name)
            return value
        if isinstance(value, list):
            return [move(v) for v in value]
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        return value

    moved: dict[str, Any] = move(config)
    moved["tenant"], moved["namespace"] = new_tenant, new_ns
    return moved


def function_names() -> list[str]:
    """The names of the shipped functions (``--only``'s choices)."""
    return [_load(config_file)["name"] for config_file in FUNCTIONS]


def _entry_of(config: dict[str, Any], source: str) -> tuple[str, tuple[str, ...]]:
    """The entry file (and extras) a config's ``className`` names (a user's config)."""
    module = str(config.get("className", "")).partition(".")[0]
    for entry, extras in FUNCTIONS.values():
        if entry == f"{module}.py":
            return entry, extras
    known = ", ".join(sorted(entry.removesuffix(".py") for entry, _ in FUNCTIONS.values()))
    raise ConfigurationError(
        f"{source}: className {config.get('className')!r} is not a packaged function "
        f"(its module must be one of {known})"
    )


def load_configs(
    *, only: tuple[str, ...] = (), config_files: tuple[Path, ...] = ()
) -> list[tuple[dict[str, Any], str, tuple[str, ...]]]:
    """What to deploy: (config, entry file, extras) each. The shipped configs (those
    named by ``only``, all without), or the user's own ``config_files`` (the shipped
    format; their ``className`` picks the packaged code).

    Raises:
        ConfigurationError: an unknown name, an unreadable or bad config file.
    """
    if config_files:
        out = []
        for path in config_files:
            try:
                config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError) as exc:
                raise ConfigurationError(f"cannot read the config {path}: {exc}") from None
            if not isinstance(config, dict) or not all(
                isinstance(config.get(k), str) and config.get(k)
                for k in ("tenant", "namespace", "name")
            ):
                raise ConfigurationError(f"{path}: a function config needs tenant, namespace, name")
            entry, extras = _entry_of(config, str(path))
            out.append((config, entry, extras))
        return out
    names = function_names()
    unknown = sorted(set(only) - set(names))
    if unknown:
        raise ConfigurationError(
            f"no packaged function {', '.join(unknown)} (one of {', '.join(names)})"
        )
    shipped = [
        (_load(config_file), entry, extras) for config_file, (entry, extras) in FUNCTIONS.items()
    ]
    return [item for item in shipped if not only or item[0]["name"] in only]


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
        return _unless_missing(lambda: self.cli.function_status(fqn))

    def create(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None:
        self.cli.create_function(fqn=fqn, config_file=config_file, py=code)

    def update(self, fqn: Fqn, config: dict[str, Any], config_file: Path, code: Path) -> None:
        self.cli.run(
            "functions", "update", "--function-config-file", str(config_file), "--py", str(code)
        )

    def delete(self, fqn: Fqn) -> bool:
        return _unless_missing(lambda: self.cli.delete_function(fqn))

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
    only: tuple[str, ...] = (),
    config_files: tuple[Path, ...] = (),
    tenant: str | None = None,
    namespace: str | None = None,
    function_admin_url: str | None = None,
    function_auth_token: str | None = None,
    admin_token_secret: Any = None,
    function_tls_trust_cert_path: str | None = None,
    dry_run: bool = False,
    wait_s: float = 300.0,
    python_version: str | None = None,
    platform: str | None = None,
    echo: Echo = print,
) -> None:
    """Create the packaged functions on the cluster, or update those already there.

    What: the shipped configs (``only``: those functions), or the user's own
    ``config_files``; moved to ``tenant``/``namespace`` when given
    (:func:`relocate`). ``code``: ``zip`` (a self-contained package each) or
    ``entry`` (only the entry file). Each config is filled in
    (:func:`render_config`) with ``function_admin_url`` (default ``admin_url``);
    the functions' admin token only when asked: ``function_auth_token`` (the
    token itself, as a clear-text secret) or ``admin_token_secret`` (a
    reference for the cluster's secrets provider) — never the token deploy
    itself uses. ``dry_run``: print what would be sent, build and send
    nothing, ask the cluster nothing. Then, unless ``wait_s`` is 0, waits
    until every function runs and is subscribed to its inputs. ``echo`` is
    told each step. Raises PulsarStateError (a failed admin call, a function
    not ready in time) or ConfigurationError.
    """
    if code not in ("zip", "entry"):
        raise ConfigurationError(f"code: zip or entry, got {code!r}")
    planned = []
    for config, entry, extras in load_configs(only=only, config_files=config_files):
        rendered, filled = render_config(
            relocate(config, tenant=tenant, namespace=namespace),
            admin_url=function_admin_url or admin_url,
            admin_token=function_auth_token,
            admin_token_secret=admin_token_secret,
            admin_tls_trust_cert_path=function_tls_trust_cert_path,
        )
        fqn = (rendered["tenant"], rendered["namespace"], rendered["name"])
        planned.append((fqn, rendered, filled, entry, extras))
    if dry_run:
        for fqn, rendered, _, entry, _ in planned:
            shown = {**rendered}
            if shown.get("secrets"):
                shown["secrets"] = {k: "<redacted>" for k in shown["secrets"]}
            echo(f"would create or update {'/'.join(fqn)} (code: {entry}, {code})")
            echo(yaml.safe_dump(shown, sort_keys=False).rstrip())
        return
    admin = _admin(admin_client, admin_url, auth)
    deployed: list[tuple[Fqn, dict[str, Any]]] = []
    try:
        # asked before anything is built (the slow part): a cluster that refuses
        # (a wrong token, no permission, no functions worker) says so at once
        existing = {fqn: admin.exists(fqn) for fqn, *_ in planned}
        with tempfile.TemporaryDirectory(prefix="pss-deploy-") as tmp:
            for fqn, config, filled, entry, extras in planned:
                py = (
                    build_function_package(
                        name=config["name"],
                        entry=_entry(entry),
                        out_dir=Path(tmp),
                        extras=extras,
                        python_version=python_version,
                        platform=platform,
                    )
                    if code == "zip"
                    else _entry(entry)
                )
                path = Path(tmp) / f"{config['name']}.yaml"  # what is sent, filled in
                path.write_text(yaml.safe_dump(config, sort_keys=False))
                if filled:
                    echo(f"{'/'.join(fqn)}: {', '.join(filled)}")
                deployed.append((fqn, config))
                if existing[fqn]:
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
    *,
    admin_url: str,
    auth: ClusterAuth,
    admin_client: str = "rest",
    only: tuple[str, ...] = (),
    config_files: tuple[Path, ...] = (),
    tenant: str | None = None,
    namespace: str | None = None,
    echo: Echo = print,
) -> None:
    """Delete the packaged functions (and their stored code) from the cluster: the
    ones :func:`deploy_functions` deploys with the same ``only``, ``config_files``,
    ``tenant`` and ``namespace``.

    A function that is not deployed is told to ``echo``, not an error.
    """
    targets = [
        relocate(config, tenant=tenant, namespace=namespace)
        for config, _, _ in load_configs(only=only, config_files=config_files)
    ]
    admin = _admin(admin_client, admin_url, auth)
    try:
        for config in targets:
            fqn = (config["tenant"], config["namespace"], config["name"])
            if admin.delete(fqn):
                echo(f"deleted {'/'.join(fqn)}")
            else:
                echo(f"{'/'.join(fqn)} was not deployed")
            admin.delete_packages(fqn)
    finally:
        admin.close()
