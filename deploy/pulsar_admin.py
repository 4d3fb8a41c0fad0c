"""The distribution's own ``bin/pulsar-admin``, driven from Python.

``pulsar-state deploy --admin-client cli`` deploys with it (the tool users run,
and what the tests check deployments against); the default, which needs no
Java, is the REST client :class:`~pulsar_state.deploy.rest_admin.PulsarAdminRest`.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

from pulsar_state.cluster_auth import ClusterAuth
from pulsar_state.deploy.distribution import PulsarDistribution
from pulsar_state.deploy.errors import PulsarAdminError

__all__ = ["PulsarAdminCli"]

log = logging.getLogger(__name__)


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
        self._global_args = auth.pulsar_admin_args() if auth is not None else []

    def run(self, *args: str) -> str:
        """Run one command; return its stdout; raise :class:`PulsarAdminError`."""
        argv = [str(self.distribution.pulsar_admin_bin), "--admin-url", self.admin_url]
        argv += [*self._global_args, *args]
        env = dict(os.environ)
        env.setdefault("PULSAR_MEM", "-Xmx256m")
        log.info("pulsar-admin %s", " ".join(args))
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
