"""A local cluster's credentials: its token secret and tokens, its TLS files.

:class:`ClusterCredentials` is what :class:`~pulsar_state.deploy.cluster.LocalCluster`
knows about authentication, kept under its data directory::

    <data_dir>/auth/secret.key, auth/<role>.token    with auth="token"
    <data_dir>/tls/ca.pem, client-<role>.pem, ...   with tls=True (see .cluster_tls)

Secrets and tokens are written readable by this user only.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pulsar_state.deploy.cluster_tls import ClusterTls, check_role
from pulsar_state.deploy.errors import BrokerNotRunningError
from pulsar_state.deploy.token_auth import TokenAuthority
from pulsar_state.errors import ConfigurationError

__all__ = ["SUPERUSER", "ClusterCredentials"]

_ROLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: the super-user's role (its token is written at each start with auth="token")
SUPERUSER = "admin"


class ClusterCredentials:
    """Tokens and TLS client certificates of the cluster in ``data_dir``."""

    data_dir: Path

    @property
    def _auth_dir(self) -> Path:
        return self.data_dir / "auth"

    def token_path(self, role: str = SUPERUSER) -> Path:
        """Where the token of ``role`` is (or will be) written."""
        return self._auth_dir / f"{role}.token"

    @property
    def tls_files(self) -> ClusterTls:
        """The CA and certificates under ``tls/`` (made by a start with ``tls``)."""
        return ClusterTls(self.data_dir / "tls")

    # -- tokens -----------------------------------------------------------------------

    def _authority(self, *, create: bool) -> TokenAuthority:
        secret_file = self._auth_dir / "secret.key"
        if not secret_file.is_file():
            if not create:
                raise BrokerNotRunningError(
                    f"no token secret in {self._auth_dir}: start the cluster with auth='token'"
                )
            self._auth_dir.mkdir(parents=True, exist_ok=True)
            _write_private(secret_file, TokenAuthority().secret)
        authority = TokenAuthority(secret=secret_file.read_bytes(), superuser=SUPERUSER)
        _write_private(self.token_path(SUPERUSER), authority.superuser_token.encode())
        return authority

    def token(self, role: str) -> str:
        """A token for ``role`` signed with the cluster's secret, also written to
        :meth:`token_path`. The role needs permissions granted by the super-user.

        Raises:
            ConfigurationError: ``role`` is not a plain name.
            BrokerNotRunningError: the cluster was never started with auth="token".
        """
        if not isinstance(role, str) or not _ROLE.match(role):
            raise ConfigurationError(f"a role is letters, digits, '.', '_', '-'; got {role!r}")
        token = self._authority(create=False).token(role)
        _write_private(self.token_path(role), token.encode())
        return token

    # -- TLS client certificates ----------------------------------------------------------

    def client_certificate(self, role: str) -> tuple[Path, Path]:
        """The TLS client certificate and key of ``role`` (its common name), signed by
        the cluster's CA; made on the first request, kept under ``tls/``. With
        ``auth="token"`` the brokers take it instead of a token over TLS; the role
        needs permissions granted by the super-user (``admin`` is the super-user).

        Raises:
            ConfigurationError: ``role`` is not a plain name.
            BrokerNotRunningError: the cluster was never started with tls=True.
            BrokerSetupError: ``cryptography`` is not installed.
        """
        check_role(role)
        files = self.tls_files
        if not files.exists():
            raise BrokerNotRunningError(
                f"no cluster CA in {files.directory}: start the cluster with tls=True (--tls)"
            )
        return files.client_certificate(role)


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` readable by this user only (a secret, a token)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
