"""The outside world of outbound requests, for tests: a resolver that answers a made-up name as
a test scripts it (and can change its answer between two lookups, as a rebinding DNS server
does), and a certificate authority whose leaf certificates name a host."""

from __future__ import annotations

import datetime
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

#: A global address that no test ever connects to: `refuse_outside` stops any connection to it
#: before a packet leaves the machine.
PUBLIC = "93.184.215.14"


@dataclass
class Resolver:
    """Answers `name` with `answers[n]` at its n-th lookup, and the last entry after that;
    every other host goes to the system's resolver."""

    name: str
    answers: list[str]
    asked: list[str] = field(default_factory=list)

    def answer(self) -> str:
        index = min(len(self.asked), len(self.answers) - 1)
        self.asked.append(self.answers[index])
        return self.answers[index]


@contextmanager
def scripted_resolver(monkeypatch: pytest.MonkeyPatch, name: str,
                      *answers: str) -> Iterator[Resolver]:
    resolver = Resolver(name, list(answers))
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != name:
            return real(host, port, *args, **kwargs)
        address = resolver.answer()
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "",
                 (address, int(port or 0)))]

    with monkeypatch.context() as patch:
        patch.setattr(socket, "getaddrinfo", getaddrinfo)
        yield resolver


@contextmanager
def refuse_outside(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every TCP connection the code opens, by address; one to anything but loopback is refused
    here, before a packet is sent (the tests' traffic stays on this machine)."""
    tried: list[str] = []
    real = socket.create_connection

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        host = str(address[0])
        tried.append(host)
        if not (host.startswith("127.") or host == "::1"):
            raise ConnectionRefusedError(f"test: no connection to {host} leaves this machine")
        return real(address, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(socket, "create_connection", create_connection)
        yield tried


@dataclass(frozen=True)
class Authority:
    """A certificate authority of the test's own, trusted by `client_context()` only."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.certificate.public_bytes(
            serialization.Encoding.PEM).decode())
        return context

    def server_context(self, hostname: str, directory: Path) -> ssl.SSLContext:
        """A server's context presenting a leaf certificate for `hostname` only."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        leaf = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)]))
                .issuer_name(self.certificate.subject)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(hours=1))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]),
                               critical=False)
                .sign(self.key, hashes.SHA256()))
        cert_file, key_file = directory / f"{hostname}.pem", directory / f"{hostname}.key"
        cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        return context


def authority() -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "outbound tests CA")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder()
                   .subject_name(name).issuer_name(name)
                   .public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(hours=1))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                                  critical=True)
                   .sign(key, hashes.SHA256()))
    return Authority(key, certificate)
