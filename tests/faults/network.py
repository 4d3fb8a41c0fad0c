"""Cut one process off the broker without closing its sockets (iptables, as root).

Packets of the process's TCP connections to the broker are dropped in both
directions on the loopback interface: to the process and to the broker the
connection looks alive, nothing arrives, exactly like a network partition.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["iptables_unavailable", "partitioned"]


def iptables_unavailable() -> str | None:
    """Why iptables cannot be used here (installs it if missing), or ``None``."""
    if os.geteuid() != 0:
        return "cutting a process off needs root (iptables)"
    if shutil.which("iptables") is None:
        for cmd in (
            ["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-qq"],
            ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-qq", "iptables"],
        ):
            result = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                return f"could not install iptables: {result.stderr[-500:]}"
    probe = subprocess.run(
        ["iptables", "-L", "OUTPUT", "-n"], check=False, capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"iptables does not work on this kernel: {probe.stderr.strip()}"
    return None


def connections(pid: int, remote_port: int) -> list[int]:
    """Local ports of ``pid``'s established TCP connections to ``remote_port``."""
    out = subprocess.run(
        ["ss", "-tnpH", "state", "established"], capture_output=True, text=True, check=True
    ).stdout
    ports = []
    for line in out.splitlines():
        if f"pid={pid}," not in line:
            continue
        fields = line.split()
        local, peer = fields[2], fields[3]
        if peer.rsplit(":", 1)[-1] == str(remote_port):
            match = re.search(r":(\d+)$", local)
            if match:
                ports.append(int(match.group(1)))
    return ports


def _rules(port: int) -> list[list[str]]:
    return [
        ["OUTPUT", "-o", "lo", "-p", "tcp", "--sport", str(port), "-j", "DROP"],
        ["OUTPUT", "-o", "lo", "-p", "tcp", "--dport", str(port), "-j", "DROP"],
    ]


@contextmanager
def partitioned(local_ports: list[int]) -> Iterator[None]:
    """Drop every packet of these loopback connections until the block exits."""
    added: list[list[str]] = []
    try:
        for port in local_ports:
            for rule in _rules(port):
                subprocess.run(["iptables", "-I", *rule], check=True)
                added.append(rule)
        yield
    finally:
        for rule in added:
            subprocess.run(["iptables", "-D", *rule], check=False)
