"""A private PostgreSQL server for the tests, from Debian's packages.

``PULSAR_STATE_TEST_POSTGRES_URL`` names an existing server (its database must
allow ``CREATE DATABASE``, or tests share it). Otherwise :func:`start_server`:

1. finds Debian's binaries (``/usr/lib/postgresql/<version>/bin``), installing
   the ``postgresql`` package with apt-get when they are missing (as root;
   idempotent: a second run finds them);
2. runs ``initdb`` (trust authentication on loopback only) in a fresh data
   directory under the git-ignored ``.cache/postgres/``, as the ``postgres``
   OS user, since initdb refuses root;
3. starts the server on 127.0.0.1 on a free port, its socket in the data
   directory, and waits until it accepts connections.

:meth:`PostgresServer.stop` stops it (fast shutdown). A server left by an
interrupted session in the same directory is stopped before the fresh start.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import socket
import sqlite3
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
ENV_URL = "PULSAR_STATE_TEST_POSTGRES_URL"
OS_USER = "postgres"
APT = ["apt-get", "-o", "DPkg::Lock::Timeout=600"]


def _version(bin_dir: str) -> float:
    try:
        return float(Path(bin_dir).parent.name)
    except ValueError:
        return 0.0


def find_bin_dir(*, install: bool = True) -> Path:
    """The newest ``/usr/lib/postgresql/*/bin`` with initdb; apt-get installs it if missing."""
    found = [d for d in glob.glob("/usr/lib/postgresql/*/bin") if Path(d, "initdb").exists()]
    if not found and install:
        if os.geteuid() != 0:
            raise RuntimeError("PostgreSQL is not installed and installing it needs root")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        log.info("installing the postgresql package")
        subprocess.run([*APT, "update", "-q"], check=True, env=env, capture_output=True)
        subprocess.run(
            [*APT, "install", "-y", "-q", "postgresql"], check=True, env=env, capture_output=True
        )
        return find_bin_dir(install=False)
    if not found:
        raise RuntimeError("no PostgreSQL binaries under /usr/lib/postgresql/*/bin")
    return Path(max(found, key=_version))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _as_postgres(*args: str | Path) -> list[str]:
    cmd = [str(a) for a in args]
    return cmd if os.geteuid() != 0 else ["runuser", "-u", OS_USER, "--", *cmd]


@dataclass
class PostgresServer:
    """A server the tests started (``data_dir`` set) or were given (``data_dir`` None)."""

    url: str
    data_dir: Path | None = None
    bin_dir: Path | None = None

    def create_database(self) -> str:
        """A new empty database on this server; its URL (the server's own when not allowed)."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
        except psycopg.errors.InsufficientPrivilege:
            return self.url
        base, _, _ = self.url.rpartition("/")
        return f"{base}/{name}"

    def stop(self) -> None:
        if self.data_dir is not None and self.bin_dir is not None:
            _pg_ctl_stop(self.bin_dir, self.data_dir / "data")


def _pg_ctl_stop(bin_dir: Path, data: Path) -> None:
    if (data / "postmaster.pid").exists():
        subprocess.run(
            _as_postgres(bin_dir / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop"),
            check=False,
            capture_output=True,
            timeout=120,
        )


def start_server(name: str = "test") -> PostgresServer:
    """The server of ``PULSAR_STATE_TEST_POSTGRES_URL``, or a fresh private one."""
    url = os.environ.get(ENV_URL)
    if url:
        return PostgresServer(url=url)
    bin_dir = find_bin_dir()
    root = REPO_ROOT / ".cache" / "postgres" / name
    data = root / "data"
    _pg_ctl_stop(bin_dir, data)  # left by an interrupted session
    shutil.rmtree(root, ignore_errors=True)
    data.mkdir(parents=True)
    if os.geteuid() == 0:
        for path in (root, data):
            shutil.chown(path, OS_USER, OS_USER)
        # the postgres user must be able to reach the data directory
        for parent in root.parents:
            if parent == Path("/"):
                break
            with contextlib.suppress(OSError):
                if not os.stat(parent).st_mode & 0o001:
                    os.chmod(parent, os.stat(parent).st_mode | 0o001)
    os.chmod(data, 0o700)
    subprocess.run(
        _as_postgres(
            bin_dir / "initdb", "-D", data, "-U", OS_USER, "-A", "trust", "-E", "UTF8", "--no-sync"
        ),
        check=True,
        capture_output=True,
        timeout=300,
    )
    port = free_port()
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {data} -c fsync=off"
    result = subprocess.run(
        _as_postgres(
            bin_dir / "pg_ctl",
            "-D",
            data,
            "-l",
            data / "server.log",
            "-o",
            options,
            "-w",
            "-t",
            "120",
            "start",
        ),
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
    )
    if result.returncode != 0:
        logfile = data / "server.log"
        tail = logfile.read_text()[-2000:] if logfile.exists() else ""
        raise RuntimeError(f"PostgreSQL did not start: {result.stderr}\n{tail}")
    server = PostgresServer(
        url=f"postgresql://{OS_USER}@127.0.0.1:{port}/postgres", data_dir=root, bin_dir=bin_dir
    )
    log.info("PostgreSQL %s on %s", bin_dir.parent.name, server.url)
    return server


def sql_rows(database: str, table: str) -> dict[str, str]:
    """``key -> value`` of a sink table, read directly (SQLite path or PostgreSQL URL)."""
    if database.startswith(("postgresql://", "postgres://")):
        with psycopg.connect(database) as conn:
            try:
                return dict(conn.execute(f"SELECT key, value FROM {table}").fetchall())
            except psycopg.errors.UndefinedTable:
                return {}
    if not Path(database).exists():
        return {}
    with contextlib.closing(sqlite3.connect(database)) as db:
        try:
            return dict(db.execute(f"SELECT key, value FROM {table}").fetchall())
        except sqlite3.OperationalError:
            return {}
