"""A worker's local copies of code packages: :class:`PackageCache`.

A record whose code was uploaded names it ``package: pss://sha256/<hex>``
and ``py: <file name>`` (the name tells a ``.py`` from a ``.zip`` and gives
the module's name). The worker runs it from a local file,
``<cache>/sha256/<hex>/<file name>``, fetched from the group's package store
(:class:`~pulsar_state.functions.package_store.PackageStore`) the first time
and kept: the cache folder (``--package-cache``, by default
``$XDG_CACHE_HOME/pulsar-state/packages``) outlives the worker, so a restart
fetches nothing it has.

* **Checked**: what the store gives is checked against its manifest (size,
  sha256); a cached file is hashed again on every use, and one whose sha256
  is not its name (the disk, a hand edit) is dropped and fetched again. A
  package that fails the check is **refused** (never run) and counted
  (:attr:`PackageCache.refused`).
* **Safe against concurrent fetches**, between threads (one lock per digest)
  and processes (two workers sharing the folder): a file is written under a
  name of its own, flushed, and renamed into place (``os.replace``, atomic),
  so a reader sees a whole package or none.

A record whose ``py`` is an ``http://`` or ``https://`` URL (given as is,
as ``pulsar-admin`` takes one) is downloaded when an instance starts (at most
the store's size limit), kept under ``<cache>/url/<sha256>/<file name>``; a
plain path (or ``file://``) is read where it is, as before (a shared
filesystem), and no package at all is a module the worker imports.
"""

from __future__ import annotations

import logging
import os
import threading
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import urlparse

from pulsar_state.errors import ConfigurationError
from pulsar_state.functions.package_manifest import (
    MAX_PACKAGE_BYTES,
    PackageCorruptError,
    check_size,
    digest_of,
    parse_package_url,
    valid_file_name,
)
from pulsar_state.functions.package_store import PackageStore

__all__ = ["PackageCache", "default_cache_dir"]

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/pulsar-state/packages`` (``~/.cache/...`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pulsar-state" / "packages"


class PackageCache:
    """See the module docstring."""

    def __init__(
        self, root: Path, store: PackageStore | None, *, download_timeout_s: float = 60.0
    ) -> None:
        self.root = Path(root)
        self._store = store
        self._download_timeout_s = download_timeout_s
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        #: packages fetched from the store (not found in the cache)
        self.fetched = 0
        #: packages refused: their bytes are not what their name says
        self.refused = 0

    def code_path(self, py: str | None, package: str | None) -> str | None:
        """Where the code of a record is on this worker (what ``load_function`` reads).

        Returns:
            the cached file of ``package``, or of a downloaded ``py`` URL; else ``py``.

        Raises:
            PackageNotFoundError: the store has no such package.
            PackageCorruptError: its bytes are not what its name says (refused, counted).
            ConfigurationError: a bad file name, or a URL that cannot be downloaded.
        """
        if package is not None:
            return str(self.package_path(package, py or ""))
        if py is not None and py.startswith(("http://", "https://")):
            return str(self.download(py))
        return py

    def _lock(self, digest: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(digest, threading.Lock())

    def package_path(self, url: str, name: str) -> Path:
        """The local file of the package ``url``, named ``name``: from the cache when
        it is there and whole, else fetched from the store, checked and cached.

        Returns:
            ``<cache>/sha256/<hex>/<name>``.

        Raises:
            ConfigurationError: ``url`` or ``name`` is malformed, or no store is set.
            PackageNotFoundError: the store has no such package.
            PackageCorruptError: its bytes are not what its name says (refused, counted).
        """
        try:
            digest = parse_package_url(url)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from exc
        if not valid_file_name(name):
            raise ConfigurationError(f"package {url}: py must be a .py or .zip file name, {name!r}")
        folder = self.root / "sha256" / digest
        with self._lock(digest):
            for cached in [folder / name, *_others(folder, name)]:
                data = _whole(cached, digest)
                if data is not None:
                    if cached.name != name:
                        self._install(data, folder / name)
                    return folder / name
            if self._store is None:
                raise ConfigurationError(f"package {url}: this worker has no package store")
            try:
                data = self._store.fetch(url)
                if digest_of(data) != digest:  # the store checks it; never run what is not
                    raise PackageCorruptError(f"package {url}: digest mismatch: refused")
            except PackageCorruptError as exc:
                self.refused += 1
                log.error("refused package %s: %s", url, exc)
                raise
            self.fetched += 1
            self._install(data, folder / name)
            return folder / name

    def download(self, url: str) -> Path:
        """Download a ``py`` given as an ``http(s)://`` URL (at most the store's limit).

        Returns:
            ``<cache>/url/<sha256>/<file name>``.

        Raises:
            ConfigurationError: the URL names no ``.py``/``.zip`` file or cannot be
                downloaded, or it is over the limit.
        """
        name = Path(urlparse(url).path).name
        if not valid_file_name(name):
            raise ConfigurationError(f"code URL {url!r} names no .py or .zip file")
        try:
            with urllib.request.urlopen(url, timeout=self._download_timeout_s) as answer:
                data = answer.read(MAX_PACKAGE_BYTES + 1)
        except OSError as exc:
            raise ConfigurationError(f"cannot download code {url}: {exc}") from exc
        check_size(len(data), url)
        target = self.root / "url" / digest_of(data) / name
        with self._lock(f"url:{target}"):
            if _whole(target, target.parent.name) is None:
                self._install(data, target)
        return target

    def _install(self, data: bytes, target: Path) -> None:
        """Write ``data`` at ``target`` atomically (a file of its own, then renamed)."""
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.parent / f".partial-{uuid.uuid4().hex}"
        try:
            with partial.open("wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)


def _others(folder: Path, name: str) -> list[Path]:
    """The other cached names of one package (the same bytes under another file name)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name != name and valid_file_name(p.name))


def _whole(path: Path, digest: str) -> bytes | None:
    """The bytes of a cached file if its sha256 is ``digest``; a damaged one is dropped.

    Returns:
        the bytes, or ``None`` (absent, unreadable, or damaged and removed).
    """
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if digest_of(data) == digest:
        return data
    log.warning("cached package %s is damaged (sha256 is not its name): fetching it again", path)
    path.unlink(missing_ok=True)
    return None
