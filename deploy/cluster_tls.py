"""A local cluster's TLS files: a throwaway CA, the brokers' certificate, client certificates.

:class:`ClusterTls` names the files of one data directory's ``tls/``
directory and makes them, once (:mod:`.cluster_certs`, with ``cryptography``,
imported only then: ``pip install 'pulsar-shared-state[test]'`` or ``pip
install cryptography``)::

    <data_dir>/tls/
      ca.pem, ca.key            the CA; its key signs client certificates later
      broker.pem, broker.key    every broker's certificate (127.0.0.1, localhost);
                                the key is PKCS#8, the only form the broker reads
      client-<role>.pem, .key   a client certificate of ``role`` (CN = role), on request

The files outlive a fresh start (a client that trusts ``ca.pem`` keeps
working); a new CA (the old one incomplete) drops the client certificates the
old one signed. Keys are readable by this user only. Nothing here makes the CA
trusted system-wide: a client names ``ca.pem`` (``tls_trust_certs_file_path=``,
``--tls-trust-cert-path``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pulsar_state.deploy.errors import BrokerSetupError
from pulsar_state.errors import ConfigurationError

__all__ = ["BROKER_HOSTS", "ClusterTls", "check_role"]

#: the names the brokers' certificate is valid for (every broker listens on loopback)
BROKER_HOSTS = ("127.0.0.1", "localhost")
#: a role as a file name and a certificate's common name
_ROLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_CA_NAME = "pulsar-shared-state local cluster CA"
_INSTALL = (
    "a TLS cluster needs the 'cryptography' package to make its certificates: "
    "pip install 'pulsar-shared-state[test]' (or pip install cryptography)"
)


def check_role(role: object) -> str:
    """``role`` when it is a plain name (letters, digits, ``.``, ``_``, ``-``).

    Raises:
        ConfigurationError: it is not.
    """
    if not isinstance(role, str) or not _ROLE.match(role):
        raise ConfigurationError(f"a role is letters, digits, '.', '_', '-'; got {role!r}")
    return role


class ClusterTls:
    """The CA, broker certificate and client certificates of one cluster (module docstring).

    Args:
        directory: the ``tls/`` directory of the cluster's data directory.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @property
    def ca_file(self) -> Path:
        """The CA's certificate: what a client trusts (``tlsTrustCertsFilePath``)."""
        return self.directory / "ca.pem"

    @property
    def ca_key_file(self) -> Path:
        """The CA's key (it signs client certificates on request)."""
        return self.directory / "ca.key"

    @property
    def cert_file(self) -> Path:
        """The brokers' certificate (``tlsCertificateFilePath``)."""
        return self.directory / "broker.pem"

    @property
    def key_file(self) -> Path:
        """The brokers' PKCS#8 key (``tlsKeyFilePath``)."""
        return self.directory / "broker.key"

    def client_files(self, role: str) -> tuple[Path, Path]:
        """Where the certificate and key of ``role`` are (or will be).

        Raises:
            ConfigurationError: ``role`` is not a plain name.
        """
        check_role(role)
        return self.directory / f"client-{role}.pem", self.directory / f"client-{role}.key"

    def exists(self) -> bool:
        """The CA and the brokers' certificate are there."""
        files = (self.ca_file, self.ca_key_file, self.cert_file, self.key_file)
        return all(path.is_file() for path in files)

    def ensure(self) -> ClusterTls:
        """Make the CA and the brokers' certificate unless they are there; ``self``.

        Raises:
            BrokerSetupError: ``cryptography`` is not installed.
        """
        if self.exists():
            return self
        try:
            from pulsar_state.deploy.cluster_certs import issue, new_ca  # noqa: PLC0415
        except ImportError as exc:
            raise _missing(exc) from exc
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob("client-*"):
            stale.unlink()  # signed by a CA that is gone
        ca_cert, ca_key = new_ca(_CA_NAME)
        cert, key = issue(ca_cert, ca_key, BROKER_HOSTS[0], hosts=BROKER_HOSTS)
        _write(self.key_file, key, private=True)
        _write(self.cert_file, cert)
        _write(self.ca_key_file, ca_key, private=True)
        _write(self.ca_file, ca_cert)
        return self

    def client_certificate(self, role: str) -> tuple[Path, Path]:
        """The certificate and key of ``role`` (CN = role), made on the first request.

        Raises:
            ConfigurationError: ``role`` is not a plain name.
            BrokerSetupError: the CA is not there (see :meth:`ensure`), or
                ``cryptography`` is not installed.
        """
        cert_file, key_file = self.client_files(role)
        if cert_file.is_file() and key_file.is_file():
            return cert_file, key_file
        if not self.exists():
            raise BrokerSetupError(f"no cluster CA in {self.directory}")
        try:
            from pulsar_state.deploy.cluster_certs import issue  # noqa: PLC0415
        except ImportError as exc:
            raise _missing(exc) from exc
        cert, key = issue(self.ca_file.read_bytes(), self.ca_key_file.read_bytes(), role)
        _write(key_file, key, private=True)
        _write(cert_file, cert)
        return cert_file, key_file


def _missing(exc: ImportError) -> Exception:
    """What a failed import of :mod:`.cluster_certs` (it needs ``cryptography``) raises."""
    if (exc.name or "").partition(".")[0] == "cryptography":
        return BrokerSetupError(_INSTALL)
    return exc


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    """Write ``data`` whole (a temporary file renamed); a key readable by this user only."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    tmp.replace(path)
