"""Certificates of a local cluster's throwaway CA, made with ``cryptography``.

Imported only when a TLS cluster makes its files (:mod:`.cluster_tls`), so that
``cryptography`` is needed by ``--tls`` alone. Everything is PEM bytes in and
out; a key is PKCS#8 (the broker reads no other form), RSA 2048, unencrypted.
"""

from __future__ import annotations

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["VALIDITY", "issue", "new_ca"]

#: the certificates' life: a throwaway CA of a local cluster
VALIDITY = datetime.timedelta(days=3650)
_ORGANIZATION = "pulsar-shared-state"


def new_ca(common_name: str) -> tuple[bytes, bytes]:
    """A new self-signed CA: its certificate and its key."""
    key = _new_key()
    name = _name(common_name)
    cert = (
        _builder(name, name, key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _pem(cert), _pkcs8(key)


def issue(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    common_name: str,
    *,
    hosts: tuple[str, ...] = (),
) -> tuple[bytes, bytes]:
    """A certificate and key signed by the CA: a server's for ``hosts`` (IP
    addresses or DNS names) when given, else a client's whose common name is
    ``common_name`` (the role a broker's TLS authentication sees).

    Raises:
        ValueError: the CA's key is not an RSA key.
    """
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, rsa.RSAPrivateKey):
        raise ValueError("the CA's key is not an RSA key")
    key = _new_key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if hosts else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        _builder(_name(common_name), ca_cert.subject, key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return _pem(builder.sign(ca_key, hashes.SHA256())), _pkcs8(key)


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, _ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, key: rsa.RSAPrivateKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + VALIDITY)
    )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pkcs8(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
