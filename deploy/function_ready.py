"""Bounded waits on a deployed Pulsar Function: running, subscribed, answering.

``pulsar-admin functions create`` returns once the worker has registered the
function; its instances start seconds later, and an instance subscribes to its
inputs only then, at the latest position unless the config says
``subscriptionPosition: Earliest``. A message sent in between is never seen by
that function. :meth:`DeployedFunction.wait_ready` waits until the worker
reports the instances running *and* every input topic shows the function's
subscription with a consumer on it; after that, what is sent is seen.

Every wait here has a bound and fails with
:class:`~pulsar_state.deploy.errors.FunctionNotReadyError`, which names the function,
says what was awaited, what was last seen, and where the instances' log is.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pulsar

from pulsar_state.cluster.admin import PulsarAdmin, topic_path
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.deploy.errors import FunctionNotReadyError
from pulsar_state.deploy.polling import poll_until
from pulsar_state.errors import ConfigurationError, PulsarStateError

__all__ = ["DeployedFunction", "function_log"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def function_log(fqn: tuple[str, str, str], logs_dir: Path | None = None) -> str:
    """Where the instances of ``fqn`` write their log.

    The functions worker writes ``<logDirectory>/functions/<tenant>/<namespace>/
    <name>/<name>-<instance>.log``; for the embedded broker ``logDirectory`` is
    ``<data dir>/logs``. Without ``logs_dir`` (a remote cluster) the answer is
    where to look on the worker.
    """
    tenant, namespace, name = fqn
    relative = Path("functions", tenant, namespace, name)
    if logs_dir is None:
        return f"<the worker's logDirectory>/{relative}/{name}-<instance>.log"
    return str(logs_dir / relative)


class DeployedFunction:
    """A function on a cluster, watched through the admin REST API."""

    def __init__(
        self,
        *,
        admin_url: str | None = None,
        admin: AdminEndpoint | None = None,
        fqn: tuple[str, str, str],
        logs_dir: Path | None = None,
        subscription: str | None = None,
        headers: dict[str, str] | None = None,
        verify: bool | str = True,
    ) -> None:
        """``admin``: the admin API with its credentials (token, basic auth or TLS client
        certificate) and TLS trust (``ClusterAuth.admin_endpoint(url)``). Or
        ``admin_url`` with, if needed, ``headers`` (authentication) and ``verify``
        (``requests``' TLS trust).

        Raises:
            ConfigurationError: neither or both of ``admin`` and ``admin_url``.
        """
        if (admin is None) == (admin_url is None):
            raise ConfigurationError("give either admin (an AdminEndpoint) or admin_url")
        self.fqn = fqn
        self.name = "/".join(fqn)
        self.log = function_log(fqn, logs_dir)
        # the worker's default subscription name is the fully qualified function name
        self.subscription = subscription or self.name
        if admin is not None:
            if headers is not None or verify is not True:
                raise ConfigurationError("set headers and TLS trust on the AdminEndpoint")
            self._admin = admin.admin(retry_s=30.0)
        else:
            assert admin_url is not None
            self._admin = PulsarAdmin(admin_url, headers=headers, retry_s=30.0, verify=verify)

    def close(self) -> None:
        self._admin.close()

    def __enter__(self) -> DeployedFunction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the cluster says ----------------------------------------------------

    def status(self) -> dict[str, Any] | None:
        """The worker's status of the function (``None`` while it does not know it)."""
        tenant, namespace, name = self.fqn
        resp = self._admin.request("GET", f"/admin/v3/functions/{tenant}/{namespace}/{name}/status")
        if resp.status_code != 200:
            return None
        status: dict[str, Any] = resp.json()
        return status

    def consumers(self, topic: str) -> int | None:
        """Consumers on the function's subscription of ``topic`` (``None``: no subscription)."""
        path = topic_path(topic)
        resp = self._admin.request("GET", f"/admin/v2/{path}/stats")
        if resp.status_code == 404:  # a partitioned topic has its stats summed up here
            resp = self._admin.request("GET", f"/admin/v2/{path}/partitioned-stats")
        if resp.status_code != 200:
            return None
        sub = resp.json().get("subscriptions", {}).get(self.subscription)
        return None if sub is None else len(sub.get("consumers") or [])

    @staticmethod
    def _errors(status: dict[str, Any] | None) -> list[str]:
        errors = []
        for instance in (status or {}).get("instances") or []:
            error = (instance.get("status") or {}).get("error")
            if error:
                errors.append(f"instance {instance.get('instanceId')}: {error.strip()[:300]}")
        return errors

    # -- bounded waits ------------------------------------------------------------

    def wait_for(
        self,
        condition: Callable[[], T | None],
        *,
        what: str,
        timeout_s: float,
        interval_s: float = 0.5,
        seen: Callable[[], str] | None = None,
    ) -> T:
        """Poll ``condition`` until it returns a truthy value; return it.

        A Pulsar or project error raised by ``condition`` counts as "not yet"
        (the last one is reported). After ``timeout_s`` it raises
        :class:`FunctionNotReadyError` saying ``what`` was awaited and, from
        ``seen``, what was last observed (:func:`~pulsar_state.deploy.polling.poll_until`).

        Returns:
            The first truthy value of ``condition``.

        Raises:
            FunctionNotReadyError: not within ``timeout_s``.
        """
        return poll_until(
            condition,
            what=what,
            timeout_s=timeout_s,
            interval_s=interval_s,
            seen=seen,
            error=functools.partial(FunctionNotReadyError, function=self.name, log=self.log),
        )

    def restart_instance(self, instance_id: int) -> bool:
        """Have the worker stop and start one instance afresh (``True``: accepted).

        A fresh start gets new ports: the worker picks an instance's control
        and metrics ports when it starts it, not when its own health check
        restarts the process (see :meth:`wait_ready`).
        """
        tenant, namespace, name = self.fqn
        resp = self._admin.request(
            "POST", f"/admin/v3/functions/{tenant}/{namespace}/{name}/{instance_id}/restart"
        )
        return resp.status_code in (200, 204)

    def _restart_stuck(self, status: dict[str, Any] | None, restarted: set[int]) -> None:
        """Restart, once each, the instances the worker lists as not running."""
        for instance in (status or {}).get("instances") or []:
            instance_id = instance.get("instanceId")
            state = instance.get("status") or {}
            if state.get("running") or not isinstance(instance_id, int) or instance_id in restarted:
                continue
            restarted.add(instance_id)
            error = (state.get("error") or "").strip()[:300]
            log.warning(
                "%s: instance %d is not running%s; restarting it (the worker gives it new "
                "ports: two instances started together can be given the same one)",
                self.name,
                instance_id,
                f" ({error})" if error else "",
            )
            if not self.restart_instance(instance_id):
                log.warning("%s: the worker refused to restart instance %d", self.name, instance_id)

    def wait_ready(
        self,
        *,
        inputs: list[str],
        instances: int,
        timeout_s: float = 180.0,
        restart_after_s: float | None = 45.0,
    ) -> None:
        """Wait until ``instances`` run and each input has the function's subscription.

        A consumer on the subscription means an instance is connected: from
        then on a message sent to the input reaches the function.

        An instance still not running after ``restart_after_s`` is restarted
        through the admin API, once (``None``: never). The worker picks each
        instance's two ports (control and metrics) as free ones when it starts
        it and binds neither itself, so two instances started together can be
        given the same port; the one that binds second fails, and the worker's
        own restarts (after a failed health check) reuse its ports, forever.
        Seen in a clean-clone ``make run``: the scheduler's instance 1 got
        instance 0's control port as its metrics port. A restart through the
        admin API starts it with new ports.
        """
        last: dict[str, Any] = {}
        started = time.monotonic()
        restarted: set[int] = set()

        def ready() -> bool:
            last["status"] = status = self.status()
            running = 0 if status is None else int(status.get("numRunning", 0))
            if running < instances:
                if restart_after_s is not None and time.monotonic() - started >= restart_after_s:
                    self._restart_stuck(status, restarted)
                return False
            last["consumers"] = {topic: self.consumers(topic) for topic in inputs}
            return all(last["consumers"].values())

        def seen() -> str:
            status = last.get("status")
            parts = [
                "the worker does not list it"
                if status is None
                else f"{status.get('numRunning', 0)}/{instances} instances running"
            ]
            for topic, consumers in last.get("consumers", {}).items():
                parts.append(
                    f"no subscription {self.subscription} on {topic}"
                    if consumers is None
                    else f"{consumers} consumers on {topic}"
                )
            return "; ".join(parts + self._errors(status))

        self.wait_for(
            ready,
            what=f"waiting for {instances} running instances subscribed to {', '.join(inputs)}",
            timeout_s=timeout_s,
            seen=seen,
        )
        log.info("%s: %d instances running and subscribed", self.name, instances)

    def receive(self, consumer: pulsar.Consumer, *, what: str, timeout_s: float) -> pulsar.Message:
        """The next message on ``consumer`` (the function's output), within ``timeout_s``."""

        def one() -> pulsar.Message | None:
            try:
                return consumer.receive(timeout_millis=1000)
            except pulsar.Timeout:
                return None

        def seen() -> str:
            try:
                status = self.status()
            except PulsarStateError as exc:
                return f"status unknown: {exc}"
            if status is None:
                return "the worker does not list it"
            processed = sum(
                int((i.get("status") or {}).get("numSuccessfullyProcessed", 0))
                for i in status.get("instances") or []
            )
            running = f"{status.get('numRunning', 0)} instances running, {processed} processed"
            return "; ".join([running, *self._errors(status)])

        return self.wait_for(one, what=what, timeout_s=timeout_s, interval_s=0, seen=seen)
