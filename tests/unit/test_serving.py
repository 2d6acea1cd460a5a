"""Secure serving's decisions and caches (ksched.loop.serving) on real sockets: a small stand-in
answers the reviews so that a test can count them and move a fake clock past the 10 s caches;
the real API server's answers are tested in tests/integration/test_secure_serving.py. Here also
what the local control plane cannot show: client certificates (it publishes no client CA), the
API server unreachable, the certificate files replaced while serving, and slow clients at the
secure port."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from prometheus_client import CollectorRegistry

from ksched.loop import server as server_module
from ksched.loop import serving
from ksched.loop.client import Kube
from ksched.loop.server import HealthServer, self_signed
from ksched.loop.serving import ANONYMOUS, DelegatedAuth, ServingTls, User

GOOD_TOKEN = "good-token"
ADMIN_TOKEN = "admin-token"


@dataclass
class Reviews:
    """What the stand-in API server answers and what it was asked."""

    allowed: set[tuple[str, str]] = field(default_factory=set)  # (user, path)
    asked: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(body)
        spec = body["spec"]
        if path.endswith("/tokenreviews"):
            users = {
                GOOD_TOKEN: {"username": "reader", "uid": "u1", "groups": ["readers"]},
                ADMIN_TOKEN: {"username": "admin", "groups": ["system:masters"]},
            }
            user = users.get(spec["token"])
            return {"status": {"authenticated": user is not None, **({"user": user} if user else {})}}
        allowed = (spec["user"], spec["nonResourceAttributes"]["path"]) in self.allowed
        return {"status": {"allowed": allowed, "reason": "" if allowed else "no RBAC policy matched"}}

    def kinds(self) -> list[str]:
        return [b["kind"] for b in self.asked]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def kube_at(port: int) -> Kube:
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    return Kube(configuration)


@pytest.fixture
def reviews() -> Iterator[tuple[Reviews, Kube]]:
    answers = Reviews()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            data = json.dumps(answers.answer(self.path, body)).encode()
            self.send_response(201)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield answers, kube_at(httpd.server_address[1])
    httpd.shutdown()
    httpd.server_close()


def bearer(token: str | None) -> Message:
    headers = Message()
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def status_of(answer: tuple[int, bytes] | None) -> int:
    return 200 if answer is None else answer[0]


def test_who_asks_decides_the_answer(reviews: tuple[Reviews, Kube]) -> None:
    answers, kube = reviews
    answers.allowed.add(("reader", "/metrics"))
    auth = DelegatedAuth(kube, Clock())
    cases = [
        # (name, path, token, want status)
        ("probe, anonymous", "/healthz", None, 200),
        ("livez, anonymous", "/livez", None, 200),
        ("metrics, anonymous", "/metrics", None, 403),
        ("metrics, a granted user", "/metrics", GOOD_TOKEN, 200),
        ("status, a user granted /metrics only", "/status", GOOD_TOKEN, 403),
        ("metrics, an unknown token", "/metrics", "forged", 401),
        ("probe, an unknown token (authentication comes first, as upstream)", "/healthz", "forged", 401),
        ("status, system:masters", "/status", ADMIN_TOKEN, 200),
        ("metrics, an empty bearer token", "/metrics", "", 401),
    ]
    got = {name: status_of(auth.gate(path, bearer(token), None)) for name, path, token, _ in cases}
    assert got == {name: want for name, _, _, want in cases}
    _, body = auth.gate("/metrics", bearer(None), None) or (200, b"")
    assert json.loads(body)["message"] == (
        'forbidden: User "system:anonymous" cannot get path "/metrics": no RBAC policy matched'
    )
    _, body = auth.gate("/status", bearer(GOOD_TOKEN), None) or (200, b"")
    assert json.loads(body)["message"] == (
        'forbidden: User "reader" cannot get path "/status": no RBAC policy matched'
    )
    (review,) = [
        b for b in answers.asked if b["kind"] == "SubjectAccessReview" and b["spec"]["user"] == "reader"
    ][:1]
    assert review["spec"]["groups"] == ["readers", "system:authenticated"]
    assert review["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}


def test_reviews_are_cached_ten_seconds_each_way(reviews: tuple[Reviews, Kube]) -> None:
    answers, kube = reviews
    clock = Clock()
    auth = DelegatedAuth(kube, clock)
    for _ in range(50):  # a scraper, and a client retrying a bad token
        assert auth.gate("/metrics", bearer(GOOD_TOKEN), None) is not None  # denied
        assert status_of(auth.gate("/metrics", bearer("forged"), None)) == 401
    assert sorted(answers.kinds()) == ["SubjectAccessReview", "TokenReview", "TokenReview"]

    answers.allowed.add(("reader", "/metrics"))
    clock.now += 9.9
    assert auth.gate("/metrics", bearer(GOOD_TOKEN), None) is not None, "the denial is cached 10 s"
    clock.now += 0.2
    assert auth.gate("/metrics", bearer(GOOD_TOKEN), None) is None, "then asked again"
    assert answers.kinds().count("SubjectAccessReview") == 2
    answers.allowed.clear()
    clock.now += 9.9
    assert auth.gate("/metrics", bearer(GOOD_TOKEN), None) is None, "the grant is cached 10 s"
    assert answers.kinds().count("TokenReview") == 3, "the token reviewed again after its 10 s"


def test_the_caches_are_bounded(reviews: tuple[Reviews, Kube], monkeypatch: pytest.MonkeyPatch) -> None:
    _, kube = reviews
    monkeypatch.setattr(serving, "CACHE_SIZE", 16)
    auth = DelegatedAuth(kube, Clock())
    for i in range(200):
        auth.gate("/metrics", bearer(f"forged-{i}"), None)
        auth.gate(f"/path-{i}", bearer(None), None)
    assert len(auth._tokens) == 16 and len(auth._denied) == 16


def test_an_unreachable_api_server_refuses_the_request_not_the_probes() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    auth = DelegatedAuth(kube_at(port), Clock())
    assert auth.gate("/healthz", bearer(None), None) is None
    code, body = auth.gate("/metrics", bearer(None), None) or (200, b"")
    assert code == 500 and body.startswith(b'Internal Server Error: "/metrics": '), body
    assert status_of(auth.gate("/metrics", bearer(GOOD_TOKEN), None)) == 401  # as upstream's authenticator


def client_certificate(
    ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate, tmp: Path
) -> tuple[Path, Path]:
    """A client certificate for CN=ops, O=sre, signed by ``ca``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, "ops"), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sre")]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (tmp / "client.crt").write_bytes(cert.public_bytes(pem))
    (tmp / "client.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return tmp / "client.crt", tmp / "client.key"


def a_ca(name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, ca


@pytest.fixture
def secure_server(
    reviews: tuple[Reviews, Kube],
) -> Iterator[tuple[HealthServer, Reviews, list[bytes | None]]]:
    answers, kube = reviews
    client_ca: list[bytes | None] = [None]
    tls = ServingTls(None, None, lambda: client_ca[0])
    server = HealthServer("127.0.0.1:0", CollectorRegistry(), lambda: [], None, tls, DelegatedAuth(kube).gate)
    server.start()
    yield server, answers, client_ca
    server.stop()


def https_get(port: int, path: str, cert: tuple[Path, Path] | None = None) -> int:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(*cert)
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_client_certificate_of_the_published_ca_is_its_cn_and_os(
    secure_server: tuple[HealthServer, Reviews, list[bytes | None]], tmp_path: Path
) -> None:
    server, answers, client_ca = secure_server
    ca_key, ca = a_ca("apiserver-client-ca")
    cert = client_certificate(ca_key, ca, tmp_path)
    answers.allowed.add(("ops", "/metrics"))
    assert https_get(server.port, "/metrics") == 403  # anonymous
    assert https_get(server.port, "/metrics", cert) == 403, (
        "no client CA published: the certificate is ignored"
    )
    client_ca[0] = ca.public_bytes(serialization.Encoding.PEM)
    assert https_get(server.port, "/metrics", cert) == 200
    (review,) = [b for b in answers.asked if b["spec"].get("user") == "ops"]
    assert review["spec"]["groups"] == ["sre", "system:authenticated"]
    assert "TokenReview" not in answers.kinds()
    other_key, other = a_ca("someone-else")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        https_get(server.port, "/metrics", client_certificate(other_key, other, tmp_path))
    assert https_get(server.port, "/healthz") == 200


def served_certificate(port: int) -> x509.Certificate:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_certificate_files_changed_are_served_to_the_next_connection(tmp_path: Path) -> None:
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    _, first, first_key = self_signed(["first.example"])
    cert_file.write_bytes(first)
    key_file.write_bytes(first_key)
    server = HealthServer(
        "127.0.0.1:0",
        CollectorRegistry(),
        lambda: [],
        None,
        ServingTls(str(cert_file), str(key_file), lambda: None),
    )
    server.start()
    try:
        assert served_certificate(server.port).subject.rfc4514_string() == "CN=first.example"
        _, second, second_key = self_signed(["second.example"])
        cert_file.write_bytes(second)
        key_file.write_bytes(second_key)
        assert served_certificate(server.port).subject.rfc4514_string() == "CN=second.example"
        key_file.write_bytes(b"half-written")  # a key that does not match: keep serving the last good one
        assert served_certificate(server.port).subject.rfc4514_string() == "CN=second.example"
    finally:
        server.stop()


def test_silent_clients_at_the_secure_port_are_closed_after_the_handshake_timeout(
    monkeypatch: pytest.MonkeyPatch, secure_server: tuple[HealthServer, Reviews, list[bytes | None]]
) -> None:
    monkeypatch.setattr(server_module, "HANDSHAKE_TIMEOUT_S", 0.5)
    server, _, _ = secure_server
    server.httpd.handshake_timeout = 0.5  # the server read it when it started
    clients = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(20)]
    try:
        started = time.monotonic()
        assert https_get(server.port, "/healthz") == 200, "answered while 20 clients stay silent"
        assert time.monotonic() - started < 2.0
        for c in clients:
            c.settimeout(0.5 + 3.0)
            assert c.recv(1) == b"", "closed by the server"
    finally:
        for c in clients:
            c.close()


def test_anonymous_is_the_unauthenticated_group() -> None:
    assert User("system:anonymous", ("system:unauthenticated",)) == ANONYMOUS
