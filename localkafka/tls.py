"""A throwaway certificate authority for the local Kafka's SSL and SASL_SSL listeners.

Made fresh for each cluster, in its work directory, with the `cryptography` library: a CA,
a certificate for each server, valid for the address it listens on and for localhost (what
hostname verification checks), and client certificates with the subjects tests map to
principals. Every file is PEM, which Kafka reads with
ssl.keystore.type = PEM and Python's ssl module reads as it is: a key and its certificate
chain in one file, the CA's certificate in another.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: long enough for any test run, short enough that a leaked file is soon worthless
_VALIDITY = datetime.timedelta(days=2)


class ThrowawayCA:
    def __init__(self, directory: Path, name: str = "localkafka test CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
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
            .sign(self._key, hashes.SHA256())
        )
        #: the truststore: the CA's certificate alone
        self.certificate_path = directory / "ca.pem"
        self.certificate_path.write_bytes(
            self._certificate.public_bytes(serialization.Encoding.PEM)
        )

    def server(self, name: str, address: str, dns_names: Sequence[str] = ()) -> Path:
        """A server's keystore, valid for `address`, localhost and `dns_names` (wildcards
        such as *.kafka.test included)."""
        names = x509.SubjectAlternativeName(
            [
                *(x509.DNSName(dns) for dns in ("localhost", *dns_names)),
                x509.IPAddress(ipaddress.ip_address(address)),
            ]
        )
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        return self._issue(name, subject, ExtendedKeyUsageOID.SERVER_AUTH, names)

    def client(self, name: str, subject: x509.Name, expired: bool = False) -> Path:
        """A client's keystore with the subject its principal is named from; `expired` makes
        one whose validity ended yesterday."""
        return self._issue(name, subject, ExtendedKeyUsageOID.CLIENT_AUTH, None, expired)

    def _issue(
        self,
        name: str,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        alternative_names: x509.SubjectAlternativeName | None,
        expired: bool = False,
    ) -> Path:
        """A keystore: the private key (PKCS#8, unencrypted, as Kafka's PEM keystore reads
        it) and the certificate chain, in one file."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        if expired:
            now -= _VALIDITY + datetime.timedelta(days=1)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if alternative_names is not None:
            builder = builder.add_extension(alternative_names, critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        path = self.directory / f"{name}.pem"
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            + certificate.public_bytes(serialization.Encoding.PEM)
            + self._certificate.public_bytes(serialization.Encoding.PEM)
        )
        return path
