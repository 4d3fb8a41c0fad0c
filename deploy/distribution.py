"""The Apache Pulsar binary distribution: obtained from Maven Central, verified, cached.

The distribution (``org.apache.pulsar:pulsar-server-distribution:<v>:tar.gz:bin``)
holds the standalone broker, ``bin/pulsar-admin`` and the Python function runner
(``instances/python-instance``), which no jar carries. It is fetched with Maven
(which knows the repository and checks its checksums, ``-C``), checked against a
pinned SHA-512 for the versions this project has tested, then unpacked into the
cache under a temporary name and renamed into place, so a half-unpacked tree is
never used.

The cache is ``$PULSAR_STATE_CACHE`` or ``$XDG_CACHE_HOME/pulsar-shared-state``
(``~/.cache/pulsar-shared-state``); Maven keeps its own copy in ``~/.m2``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from pulsar_state.deploy.download_progress import watch_download
from pulsar_state.deploy.errors import BrokerSetupError

__all__ = ["DEFAULT_PULSAR_VERSION", "PulsarDistribution", "default_cache_dir"]

log = logging.getLogger(__name__)

DEFAULT_PULSAR_VERSION = "4.0.8"

#: SHA-512 of the tarballs this project has tested. Other versions are accepted
#: on Maven's own checksum verification alone (and a warning).
KNOWN_SHA512 = {
    "4.0.8": (
        "65b769b10696cdfebf7fc5bcdc95dd663702e27051e616c1a13cb100e91279525be35352171"
        "befe7b0011176330aab29bd0a6c8a0f2f0646641af46d2e33cbd6"
    ),
}

_ARTIFACT = "org.apache.pulsar:pulsar-server-distribution:{version}:tar.gz:bin"
#: bytes of the pinned versions' tarballs (the download's progress bar total)
KNOWN_SIZE = {"4.0.8": 245_494_718}
_MIN_JAVA = 17


def default_cache_dir() -> Path:
    """Where downloads and unpacked distributions live."""
    explicit = os.environ.get("PULSAR_STATE_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pulsar-shared-state"


@contextlib.contextmanager
def _cache_lock(cache_dir: Path) -> Iterator[None]:
    """Serialise concurrent set-ups (two test sessions, two terminals)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _sha512(path: Path) -> str:
    digest = hashlib.sha512()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def java_executable() -> str:
    """The ``java`` the standalone will run with; Java 17 or newer is required."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not candidate or not os.access(candidate, os.X_OK):
        raise BrokerSetupError(
            "Java was not found (no JAVA_HOME, no `java` on PATH). Pulsar needs Java "
            f"{_MIN_JAVA}+; on Debian: apt-get install openjdk-17-jre-headless"
        )
    proc = subprocess.run(
        [candidate, "-version"], capture_output=True, text=True, check=False, timeout=60
    )
    text = proc.stderr + proc.stdout
    major = _java_major(text)
    if major is None or major < _MIN_JAVA:
        raise BrokerSetupError(
            f"Pulsar needs Java {_MIN_JAVA}+, but {candidate} reports: {text.strip()[:200]}"
        )
    return candidate


def _java_major(version_output: str) -> int | None:
    """Parse the major version out of ``java -version`` output."""
    for token in version_output.replace('"', " ").split():
        head = token.split(".")[0].split("-")[0].split("+")[0]
        if head.isdigit() and token[0].isdigit():
            major = int(head)
            if major == 1 and token.startswith("1."):  # "1.8.0_392" style
                return int(token.split(".")[1])
            return major
    return None


class _DownloadFailedError(Exception):
    pass


@dataclass(frozen=True, kw_only=True)
class PulsarDistribution:
    """One unpacked, verified Pulsar binary distribution in the cache."""

    version: str = DEFAULT_PULSAR_VERSION
    cache_dir: Path | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.version, str) or not self.version[:1].isdigit():
            raise ValueError(f"version must look like '4.0.8', got {self.version!r}")

    # -- locations ------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self._cache / f"apache-pulsar-{self.version}"

    @property
    def _cache(self) -> Path:
        return self.cache_dir if self.cache_dir is not None else default_cache_dir()

    @property
    def pulsar_bin(self) -> Path:
        return self.root / "bin" / "pulsar"

    @property
    def pulsar_admin_bin(self) -> Path:
        return self.root / "bin" / "pulsar-admin"

    @property
    def python_instance_main(self) -> Path:
        return self.root / "instances" / "python-instance" / "python_instance_main.py"

    @property
    def _marker(self) -> Path:
        return self.root / ".pulsar-state-verified"

    def is_ready(self) -> bool:
        return self._marker.is_file() and self.pulsar_bin.is_file()

    # -- obtain ---------------------------------------------------------------

    def ensure(self) -> PulsarDistribution:
        """Download, verify and unpack the distribution unless the cache has it."""
        if self.is_ready():
            return self
        with _cache_lock(self._cache):
            if self.is_ready():  # another process finished while we waited
                return self
            tarball = self._download()
            self._verify(tarball)
            self._unpack(tarball)
        return self

    def _download(self) -> Path:
        downloads = self._cache / "downloads"
        downloads.mkdir(parents=True, exist_ok=True)
        tarball = downloads / f"pulsar-server-distribution-{self.version}-bin.tar.gz"
        if tarball.is_file() and self._checksum_ok(tarball):
            return tarball
        mvn = shutil.which("mvn")
        if not mvn:
            raise BrokerSetupError(
                "Maven (`mvn`) was not found on PATH; it fetches the Pulsar distribution "
                f"{_ARTIFACT.format(version=self.version)}. On Debian: apt-get install maven"
            )
        log.info("fetching Pulsar %s distribution with Maven (about 240 MB)", self.version)
        # Maven (-B) shows no progress: watch the file grow in its local repository
        local_repo = Path.home() / ".m2" / "repository"
        artifact_dir = local_repo / "org" / "apache" / "pulsar" / "pulsar-server-distribution"
        try:
            with watch_download(
                artifact_dir / self.version,
                f"pulsar-server-distribution-{self.version}-bin.tar.gz",
                total=KNOWN_SIZE.get(self.version),
                label=f"downloading Pulsar {self.version}",
            ):
                self._run_maven(mvn, downloads)
        except _DownloadFailedError as exc:
            raise BrokerSetupError(
                f"could not download {_ARTIFACT.format(version=self.version)}", log_tail=str(exc)
            ) from exc
        if not tarball.is_file():
            raise BrokerSetupError(f"Maven finished but {tarball} is missing")
        return tarball

    @retry(
        retry=retry_if_exception_type(_DownloadFailedError),
        stop=stop_after_attempt(3),
        wait=wait_exponential(multiplier=2, max=30),
        reraise=True,
    )
    def _run_maven(self, mvn: str, downloads: Path) -> None:
        cmd = [
            mvn,
            "-B",
            "-q",
            "-C",  # strict checksums: fail on a checksum mismatch
            "dependency:copy",
            f"-Dartifact={_ARTIFACT.format(version=self.version)}",
            f"-DoutputDirectory={downloads}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
            log.warning("maven download failed (exit %s), retrying", proc.returncode)
            raise _DownloadFailedError(tail)

    def _checksum_ok(self, tarball: Path) -> bool:
        expected = KNOWN_SHA512.get(self.version)
        return expected is None or _sha512(tarball) == expected

    def _verify(self, tarball: Path) -> None:
        expected = KNOWN_SHA512.get(self.version)
        if expected is None:
            log.warning(
                "Pulsar %s has no pinned SHA-512 here; relying on Maven's checksum check",
                self.version,
            )
            return
        actual = _sha512(tarball)
        if actual != expected:
            tarball.unlink(missing_ok=True)
            raise BrokerSetupError(
                f"{tarball.name} failed verification: SHA-512 {actual[:16]}... "
                f"!= pinned {expected[:16]}...; the file was removed, try again"
            )

    def _unpack(self, tarball: Path) -> None:
        staging = self._cache / f".unpack-{self.version}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        log.info("unpacking %s", tarball.name)
        try:
            with tarfile.open(tarball, "r:gz") as tar:
                tar.extractall(staging, filter="tar")
        except (tarfile.TarError, OSError, EOFError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            tarball.unlink(missing_ok=True)
            raise BrokerSetupError(f"{tarball.name} is corrupt ({exc}); removed it") from exc
        inner = staging / f"apache-pulsar-{self.version}"
        if not (inner / "bin" / "pulsar").is_file():
            shutil.rmtree(staging, ignore_errors=True)
            raise BrokerSetupError(f"{tarball.name} has no apache-pulsar-{self.version}/bin/pulsar")
        shutil.rmtree(self.root, ignore_errors=True)
        inner.rename(self.root)
        shutil.rmtree(staging, ignore_errors=True)
        self._marker.write_text(KNOWN_SHA512.get(self.version, "maven-checksum") + "\n")
