"""The distribution's own ``bin/pulsar-admin``, driven from Python.

``pulsar-state deploy --admin-client cli`` deploys with it (the tool users run,
and what the tests check deployments against); the default, which needs no
Java, is the REST client :class:`~pulsar_state.deploy.rest_admin.PulsarAdminRest`.

Secrets stay off the command line: any user of the machine can read a
process's arguments (``ps``), so the ``--auth-plugin`` / ``--auth-params`` of
:class:`~pulsar_state.cluster.auth.ClusterAuth` (a JWT, a basic password) are
not passed as options. Each run writes them, as ``authPlugin`` / ``authParams``
after the lines of the client config in use (``$PULSAR_CLIENT_CONF``, else the
distribution's ``conf/client.conf``), into a ``client.conf`` of mode 0600 in a
private temporary directory (0700), hands its path over in
``PULSAR_CLIENT_CONF`` (which ``bin/pulsar-admin`` passes to the tool as its
config file) and removes it when the command ends. The TLS trust options are
not secret and stay on the command line.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.deploy.distribution import PulsarDistribution
from pulsar_state.deploy.errors import PulsarAdminError
from pulsar_state.errors import ConfigurationError

__all__ = ["PulsarAdminCli", "client_conf_line"]

log = logging.getLogger(__name__)

#: the pulsar-admin options that carry secrets, and their client.conf keys
_SECRET_OPTIONS = {"--auth-plugin": "authPlugin", "--auth-params": "authParams"}


def _split_secrets(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """``ClusterAuth.pulsar_admin_args()`` split into client.conf properties and the rest."""
    secrets: dict[str, str] = {}
    rest: list[str] = []
    it = iter(args)
    for arg in it:
        if arg in _SECRET_OPTIONS:
            secrets[_SECRET_OPTIONS[arg]] = next(it)
        else:
            rest.append(arg)
    return secrets, rest


def client_conf_line(key: str, value: str) -> str:
    """``key=value`` as Java's ``Properties.load`` reads it back exactly.

    Backslashes, line breaks, a leading space and characters outside printable
    ASCII (the file is read as ISO-8859-1) are escaped.
    """
    out = []
    for i, char in enumerate(value):
        if char == "\\":
            out.append("\\\\")
        elif char in "\n\r\t\f":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}[char])
        elif char == " " and i == 0:
            out.append("\\ ")
        elif not " " <= char <= "~":
            out.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else _surrogates(char))
        else:
            out.append(char)
    return f"{key}={''.join(out)}"


def _surrogates(char: str) -> str:
    code = ord(char) - 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


class PulsarAdminCli:
    """Run ``bin/pulsar-admin`` of a distribution against one admin URL."""

    def __init__(
        self,
        *,
        admin_url: str,
        distribution: PulsarDistribution | None = None,
        timeout_s: float = 180.0,
        auth: ClusterAuth | None = None,
    ) -> None:
        """``auth``: passed on as ``pulsar-admin``'s own ``--auth-*``/``--tls-*`` options."""
        if not admin_url.startswith(("http://", "https://")):
            raise ValueError(f"admin_url must be an http(s) URL, got {admin_url!r}")
        self.admin_url = admin_url
        self.distribution = (distribution or PulsarDistribution()).ensure()
        self.timeout_s = timeout_s
        self._secrets, self._global_args = _split_secrets(
            auth.pulsar_admin_args() if auth is not None else []
        )

    def _base_conf(self, env: dict[str, str]) -> str:
        """The client config pulsar-admin would read without us: ``$PULSAR_CLIENT_CONF``
        or the distribution's ``conf/client.conf`` (empty if there is none)."""
        given = env.get("PULSAR_CLIENT_CONF")
        path = Path(given) if given else self.distribution.root / "conf" / "client.conf"
        try:
            return path.read_text(encoding="latin-1")
        except FileNotFoundError:
            return ""
        except OSError as exc:
            raise ConfigurationError(f"cannot read the client config {path}: {exc}") from exc

    @contextmanager
    def invocation(self, *args: str) -> Iterator[tuple[list[str], dict[str, str]]]:
        """The command line and environment of one run (secrets in a private file).

        The file exists while the context is open and is removed on leaving it.
        """
        argv = [str(self.distribution.pulsar_admin_bin), "--admin-url", self.admin_url]
        argv += [*self._global_args, *args]
        env = dict(os.environ)
        env.setdefault("PULSAR_MEM", "-Xmx256m")
        if not self._secrets:
            yield argv, env
            return
        text = self._base_conf(env)
        lines = [client_conf_line(k, v) for k, v in self._secrets.items()]
        with tempfile.TemporaryDirectory(prefix="pulsar-admin-") as private:  # mode 0700
            conf = Path(private) / "client.conf"
            fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="latin-1") as out:
                out.write(text if text.endswith("\n") or not text else text + "\n")
                out.write("\n".join(lines) + "\n")
            env["PULSAR_CLIENT_CONF"] = str(conf)
            yield argv, env

    def run(self, *args: str) -> str:
        """Run one command; return its stdout; raise :class:`PulsarAdminError`."""
        log.info("pulsar-admin %s", " ".join(args))
        with self.invocation(*args) as (argv, env):
            proc = subprocess.run(
                argv, capture_output=True, text=True, env=env, timeout=self.timeout_s, check=False
            )
        if proc.returncode != 0:
            raise PulsarAdminError(list(args), proc.returncode, proc.stdout + proc.stderr)
        return proc.stdout

    def run_json(self, *args: str) -> Any:
        return json.loads(self.run(*args))

    # -- functions --------------------------------------------------------------

    def create_function(
        self,
        *,
        fqn: tuple[str, str, str],
        py: Path | None = None,
        classname: str | None = None,
        inputs: list[str] | None = None,
        output: str | None = None,
        config_file: Path | None = None,
        extra: list[str] | None = None,
    ) -> None:
        tenant, namespace, name = fqn
        args = ["functions", "create", "--tenant", tenant, "--namespace", namespace]
        args += ["--name", name]
        if config_file is not None:
            args += ["--function-config-file", str(config_file)]
        if py is not None:
            args += ["--py", str(py)]
        if classname is not None:
            args += ["--classname", classname]
        if inputs:
            args += ["--inputs", ",".join(inputs)]
        if output:
            args += ["--output", output]
        self.run(*args, *(extra or []))

    def update_parallelism(self, fqn: tuple[str, str, str], parallelism: int) -> None:
        """``functions update --parallelism``: the worker adds or stops instances."""
        tenant, namespace, name = fqn
        self.run(
            "functions",
            "update",
            "--tenant",
            tenant,
            "--namespace",
            namespace,
            "--name",
            name,
            "--parallelism",
            str(parallelism),
        )

    def function_status(self, fqn: tuple[str, str, str]) -> dict[str, Any]:
        tenant, namespace, name = fqn
        status: dict[str, Any] = self.run_json(
            "functions", "status", "--tenant", tenant, "--namespace", namespace, "--name", name
        )
        return status

    def delete_function(self, fqn: tuple[str, str, str]) -> None:
        tenant, namespace, name = fqn
        self.run(
            "functions", "delete", "--tenant", tenant, "--namespace", namespace, "--name", name
        )
