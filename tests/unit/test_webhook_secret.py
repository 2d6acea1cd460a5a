"""Webhook replicas share one self-generated certificate through a Secret, so the caBundle
every replica writes trusts whichever replica the Service sends a review to (before, each wrote
its own CA, the last writer won, and reviews sent to the other replica failed TLS: "the webhook
routed one pod but not the next")."""

from __future__ import annotations

import base64
import datetime as dt
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cryptography import x509

from ksched.cluster.local import free_port
from ksched.config import WebhookConfig, parse_config
from ksched.errors import ConfigError
from ksched.loop.client import ApiUnavailableError, Response
from ksched.loop.scheduling import webhook as webhook_module
from ksched.loop.scheduling.webhook import SECRET_KEYS, Webhook, self_signed, shared_certificate

NS = "ksched-system"
SECRET = "ksched-webhook-tls"
SECRETS_PATH = f"/api/v1/namespaces/{NS}/secrets"
SECRET_PATH = f"{SECRETS_PATH}/{SECRET}"
CONFIG_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/ksched"
HOSTS = ["127.0.0.1", "ksched.ksched-system.svc"]
NOW = dt.datetime.now(dt.UTC)

Pems = tuple[bytes, bytes, bytes]


def secret_of(pems: Pems, version: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NS, "resourceVersion": str(version)},
        "type": "kubernetes.io/tls",
        "data": {k: base64.b64encode(v).decode() for k, v in zip(SECRET_KEYS, pems, strict=True)},
    }


def pems_of(secret: dict[str, Any]) -> Pems:
    a, b, c = (base64.b64decode(secret["data"][k]) for k in SECRET_KEYS)
    return a, b, c


class Api:
    """The API server as far as the webhook uses it: one Secret (create, replace at its
    resourceVersion) and a configuration with two webhooks. ``before_write`` runs before a
    write is judged, as another replica writing in between; ``down`` requests are refused."""

    def __init__(self, secret: dict[str, Any] | None = None) -> None:
        self.secret = secret
        self.version = 1
        self.down = 0
        self.refuse_secrets = False
        self.before_write: Callable[[], None] | None = None
        self.calls: list[tuple[str, str]] = []
        self.bundles: list[str] | None = None
        self.published = threading.Event()

    def store(self, pems: Pems) -> None:
        """Another replica's write."""
        self.version += 1
        self.secret = secret_of(pems, self.version)

    def request(self, method: str, path: str, body: Any = None, content_type: str = "") -> Response:
        self.calls.append((method, path))
        if self.down > 0:
            self.down -= 1
            raise ApiUnavailableError("connection refused")
        if path == CONFIG_PATH:
            if method == "GET":
                return Response(200, b'{"webhooks": [{"name": "a"}, {"name": "b"}]}')
            self.bundles = [op["value"] for op in body]
            self.published.set()
            return Response(200, b"{}")
        if self.refuse_secrets:
            return Response(403, b'{"reason": "Forbidden"}')
        if method == "GET":
            assert path == SECRET_PATH
            return Response(404, b"{}") if self.secret is None else Response(200, _json(self.secret))
        if self.before_write is not None:
            write, self.before_write = self.before_write, None
            write()
        if method == "POST":
            assert path == SECRETS_PATH and body["metadata"]["name"] == SECRET
            if self.secret is not None:
                return Response(409, b'{"reason": "AlreadyExists"}')
        else:
            assert (method, path) == ("PUT", SECRET_PATH)
            if self.secret is None:
                return Response(404, b"{}")
            if body["metadata"]["resourceVersion"] != self.secret["metadata"]["resourceVersion"]:
                return Response(409, b'{"reason": "Conflict"}')
        self.version += 1
        self.secret = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        return Response(201 if method == "POST" else 200, _json(self.secret))

    def writes(self) -> list[str]:
        return [m for m, p in self.calls if p.startswith(SECRETS_PATH) and m in ("POST", "PUT")]


def _json(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@pytest.fixture
def hooks() -> Iterator[Callable[[Api], Webhook]]:
    started: list[Webhook] = []

    def make(api: Api) -> Webhook:
        config = WebhookConfig(
            enabled=True,
            address=f"127.0.0.1:{free_port()}",
            hosts=tuple(HOSTS),
            configuration_name="ksched",
            secret_name=SECRET,
            secret_namespace=NS,
        )
        hook = Webhook(config, "ksched", lambda pod: True, api)  # type: ignore[arg-type]
        hook.start()
        started.append(hook)
        return hook

    yield make
    for hook in started:
        hook.stop()


def served(hook: Webhook, server_name: str | None = None) -> x509.Certificate:
    """The certificate a new connection to the webhook is shown (with SNI when a name is given)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE

    with (
        socket.create_connection(("127.0.0.1", hook.port), timeout=5) as sock,
        context.wrap_socket(sock, server_hostname=server_name) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def published(api: Api) -> bytes:
    assert api.bundles is not None and len(set(api.bundles)) == 1, api.bundles
    return base64.b64decode(api.bundles[0])


def test_two_replicas_serve_one_certificate_and_publish_one_ca(hooks: Callable[[Api], Webhook]) -> None:
    api = Api()
    first = hooks(api)
    assert api.writes() == ["POST"] and api.secret is not None
    assert api.secret["type"] == "kubernetes.io/tls"
    ca, tls_crt, _ = pems_of(api.secret)
    assert published(api) == ca
    api.bundles = None
    second = hooks(api)
    assert api.writes() == ["POST"], "the second replica read the Secret and wrote nothing"
    assert published(api) == ca, "both replicas write the same bundle"
    for hook in (first, second):
        assert hook.ca_pem == ca
        # Without SNI (the API server calling an IP) and with it (a Service's DNS name).
        assert served(hook) == served(hook, "ksched.ksched-system.svc") == cert(tls_crt)


def test_a_replica_that_loses_the_create_race_serves_the_winners(hooks: Callable[[Api], Webhook]) -> None:
    api = Api()
    winner = self_signed(HOSTS)
    api.before_write = lambda: api.store(winner)
    hook = hooks(api)
    assert api.writes() == ["POST"] and api.secret is not None and pems_of(api.secret) == winner
    assert served(hook) == cert(winner[1])
    assert published(api) == winner[0]


def expiring(monkeypatch: pytest.MonkeyPatch) -> Pems:
    """A certificate for HOSTS with ten days left."""
    with monkeypatch.context() as mp:
        mp.setattr(webhook_module, "CERT_DAYS", 10)
        return self_signed(HOSTS)


def test_an_expiring_certificate_is_replaced_at_its_resource_version(
    hooks: Callable[[Api], Webhook], monkeypatch: pytest.MonkeyPatch
) -> None:
    api = Api(secret_of(expiring(monkeypatch)))
    hook = hooks(api)
    assert api.writes() == ["PUT"] and api.secret is not None
    ca, tls_crt, _ = pems_of(api.secret)
    assert cert(tls_crt).not_valid_after_utc - NOW > dt.timedelta(days=300)
    assert served(hook) == cert(tls_crt) and published(api) == ca


def test_a_replica_that_loses_the_replace_race_reads_again_and_serves_the_winners(
    hooks: Callable[[Api], Webhook], monkeypatch: pytest.MonkeyPatch
) -> None:
    api = Api(secret_of(expiring(monkeypatch)))
    winner = self_signed(HOSTS)
    api.before_write = lambda: api.store(winner)
    hook = hooks(api)
    assert api.writes() == ["PUT"], "its PUT was refused 409, and the winner's certificate is usable"
    assert api.secret is not None and pems_of(api.secret) == winner
    assert served(hook) == cert(winner[1]) and published(api) == winner[0]


def test_a_usable_secret_is_served_without_a_write(hooks: Callable[[Api], Webhook]) -> None:
    pems = self_signed(HOSTS)
    api = Api(secret_of(pems))
    hook = hooks(api)
    assert api.writes() == []
    assert served(hook) == cert(pems[1]) and published(api) == pems[0]


def test_until_the_secret_is_read_a_replica_publishes_nothing_then_serves_the_shared_certificate(
    hooks: Callable[[Api], Webhook], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhook_module, "PUBLISH_RETRY_FIRST_S", 0.3)
    pems = self_signed(HOSTS)
    api = Api(secret_of(pems))
    api.down = 2
    hook = hooks(api)  # the API server refuses the first read: start returns, serving
    own = served(hook)
    assert own != cert(pems[1]) and api.bundles is None, "its own CA would displace the shared one"
    assert api.published.wait(5), api.calls
    assert served(hook) == cert(pems[1]) and published(api) == pems[0]


def test_a_refused_secret_publishes_no_ca_of_its_own(
    hooks: Callable[[Api], Webhook], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the RBAC for the Secret, one replica's CA in the bundle would again trust it alone.
    monkeypatch.setattr(webhook_module, "PUBLISH_RETRY_FIRST_S", 0.05)
    api = Api()
    api.refuse_secrets = True
    hooks(api)
    assert not api.published.wait(0.5) and api.secret is None
    assert len([c for c in api.calls if c[1] == SECRET_PATH]) > 1, "retried"
    api.refuse_secrets = False  # the Role is applied
    assert api.published.wait(5), api.calls
    assert api.secret is not None and published(api) == pems_of(api.secret)[0]


def with_data(pems: Pems, **data: bytes | None) -> dict[str, Any]:
    secret = secret_of(pems)
    for key, value in data.items():
        name = key.replace("_", ".")
        if value is None:
            del secret["data"][name]
        else:
            secret["data"][name] = base64.b64encode(value).decode()
    return secret


GOOD = self_signed(HOSTS)
OTHER = self_signed(HOSTS)


@pytest.mark.parametrize(
    ("name", "secret", "hosts", "now", "why"),
    [
        ("usable", secret_of(GOOD), HOSTS, NOW, None),
        ("names checked without case", secret_of(GOOD), ["KSCHED.ksched-system.svc"], NOW, None),
        ("no key", with_data(GOOD, tls_key=None), HOSTS, NOW, "no tls.key"),
        ("another host", secret_of(GOOD), [*HOSTS, "ksched.other.svc"], NOW, "does not name ksched.other.svc"),
        ("another IP", secret_of(GOOD), ["10.0.0.1"], NOW, "does not name 10.0.0.1"),
        ("29 days left", secret_of(GOOD), HOSTS, NOW + dt.timedelta(days=365 - 29), "a certificate that expires"),
        ("31 days left", secret_of(GOOD), HOSTS, NOW + dt.timedelta(days=365 - 31), None),
        ("not yet valid", secret_of(GOOD), HOSTS, NOW - dt.timedelta(days=1), "valid only from"),
        ("another CA", with_data(GOOD, ca_crt=OTHER[0]), HOSTS, NOW, "not a certificate signed by its CA"),
        ("another key", with_data(GOOD, tls_key=OTHER[2]), HOSTS, NOW, "tls.key is not the key of tls.crt"),
        ("not PEM", with_data(GOOD, tls_crt=b"garbage"), HOSTS, NOW, "not a certificate signed by its CA"),
    ],
)  # fmt: skip
def test_which_secrets_a_replica_serves(
    name: str, secret: dict[str, Any], hosts: list[str], now: dt.datetime, why: str | None
) -> None:
    got = shared_certificate(secret, hosts, now)
    if why is None:
        assert got == GOOD, name
    else:
        assert isinstance(got, str) and why in got, (name, got)


def webhook_config(webhook: dict[str, Any], namespace: str = NS) -> WebhookConfig:
    return parse_config(
        {
            "apiVersion": "ksched.io/v1alpha1",
            "kind": "KschedConfiguration",
            "leaderElection": {"resourceNamespace": namespace},
            "webhook": webhook,
        }
    ).webhook


def test_the_secret_lives_in_kscheds_namespace_and_null_means_a_certificate_per_replica() -> None:
    default = webhook_config({"enabled": True})
    assert (default.secret_name, default.secret_namespace) == ("ksched-webhook-tls", NS)
    assert webhook_config({"secretName": "tls.ksched"}, "sched").secret_namespace == "sched"
    assert webhook_config({"secretName": None}).secret_name is None


@pytest.mark.parametrize("bad", ["Ksched-TLS", "-tls", "tls_cert", "a" * 254, 5])
def test_a_bad_secret_name_names_the_key(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"webhook\.secretName"):
        webhook_config({"secretName": bad})
