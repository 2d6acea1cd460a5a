"""Mutating admission webhook: route opted-in pods to ksched while it can schedule them.

``spec.schedulerName`` is immutable once a pod exists, so delegation is
decided at admission: the API server sends pod CREATE reviews for the
namespaces and objects selected by ksched's MutatingWebhookConfiguration,
and ksched answers with a patch setting ``schedulerName`` to its profile
only while a leader holds a fresh lease and this replica's informers are
synced. Otherwise it allows the pod unchanged, and with ``failurePolicy:
Ignore`` a ksched that is down leaves new pods on default-scheduler. Pods
that name a scheduler other than default-scheduler are never touched, nor
are pods with ``spec.resourceClaims``: ksched does not allocate dynamic
resources, so those stay with default-scheduler.

TLS: a certificate and key from files, or a self-generated CA and serving
certificate whose CA is written into the configuration's ``caBundle``.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import ipaddress
import json
import logging
import ssl
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ksched.config import WebhookConfig
from ksched.loop.client import ApiUnavailableError, Kube
from ksched.loop.server import BackgroundServer
from ksched.objects import DEFAULT_SCHEDULER, Obj, meta, spec, uses_resource_claims

log = logging.getLogger(__name__)

CERT_DAYS = 365
REVIEW_API_VERSION = "admission.k8s.io/v1"
# The API server's request bodies are at most 3 MiB; a review holds the object and its old version.
MAX_REVIEW_BYTES = 8 * 1024 * 1024
# The API server sends a review at once, and waits 10 s for a webhook by default (timeoutSeconds).
READ_TIMEOUT_S = 10.0
DRAIN_TIMEOUT_S = 1.0
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024
# Publishing the CA is retried until it lands: first after a second, doubling up to 30 s.
PUBLISH_RETRY_FIRST_S = 1.0
PUBLISH_RETRY_MAX_S = 30.0
# Marks pods the webhook routed, so operators can tell them from pods that asked for ksched.
ROUTED_ANNOTATION = "ksched.io/routed-by"


def self_signed(hosts: list[str]) -> tuple[bytes, bytes, bytes]:
    """A CA, and a serving certificate for ``hosts`` signed by it: (ca_pem, cert_pem, key_pem)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ksched-webhook-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CERT_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem), cert.public_bytes(pem), key_pem


class BadReviewError(ValueError):
    """A request that is not an AdmissionReview ksched can answer (HTTP 400 or the status given)."""

    def __init__(self, message: str, status: int = 400, unread: int = 0) -> None:
        super().__init__(message)
        self.status = status
        # Bytes of the body the client is still sending (read and dropped before closing).
        self.unread = unread


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_review(body: bytes) -> dict[str, Any]:
    """An ``admission.k8s.io/v1`` AdmissionReview with a request and its uid, or :class:`BadReviewError`."""
    try:
        review = json.loads(body, parse_constant=_reject_constant)
    except RecursionError:
        raise BadReviewError("not an AdmissionReview: nested too deeply") from None
    except ValueError as err:
        raise BadReviewError(f"not an AdmissionReview: {err}") from None
    if not isinstance(review, dict):
        raise BadReviewError(f"not an AdmissionReview: a JSON {type(review).__name__}")
    if review.get("kind") != "AdmissionReview" or review.get("apiVersion") != REVIEW_API_VERSION:
        raise BadReviewError(
            f"expected kind AdmissionReview, apiVersion {REVIEW_API_VERSION}; "
            f"got {str(review.get('kind'))[:60]!r}, {str(review.get('apiVersion'))[:60]!r}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReviewError("AdmissionReview without a request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReviewError("AdmissionReview request without a uid")
    return review


def review_response(
    review: dict[str, Any], scheduler: str, can_route: Callable[[Obj], bool]
) -> dict[str, Any]:
    """The answer to a :func:`parse_review` review: allowed always; a patch only when routing a
    pod ksched can place (``can_route``, asked last)."""
    request = review["request"]
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    pod = request.get("object")
    kind = request.get("kind")
    if (
        isinstance(pod, dict)
        and isinstance(pod.get("metadata"), dict)
        and isinstance(pod.get("spec"), dict)
        and isinstance(kind, dict)
        and kind.get("kind") == "Pod"
        and request.get("operation") == "CREATE"
        and spec(pod).get("schedulerName") in (None, "", DEFAULT_SCHEDULER)
        and not uses_resource_claims(pod)
        and isinstance(meta(pod).get("annotations") or {}, dict)
        and can_route(pod)
    ):
        patch: list[dict[str, Any]] = [{"op": "add", "path": "/spec/schedulerName", "value": scheduler}]
        if not meta(pod).get("annotations"):
            patch.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        patch.append({"op": "add", "path": "/metadata/annotations/ksched.io~1routed-by", "value": "webhook"})
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class Webhook(BackgroundServer):
    def __init__(
        self, config: WebhookConfig, scheduler: str, can_route: Callable[[Obj], bool], kube: Kube
    ) -> None:
        self.config = config
        self.scheduler = scheduler
        self.can_route = can_route
        self.kube = kube
        self._stopped = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            # A client that stops sending mid-request is answered 408 after this, not waited on forever.
            timeout = READ_TIMEOUT_S

            def do_POST(self) -> None:
                try:
                    review = parse_review(self._body())
                    answer = review_response(review, outer.scheduler, outer.can_route)
                except BadReviewError as err:
                    self._refuse(err.status, str(err), err.unread)
                    return
                body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _body(self) -> bytes:
                raw = self.headers.get("Content-Length")
                if raw is None or not raw.strip().isdigit():
                    raise BadReviewError(f"Content-Length {raw!r}: an AdmissionReview needs its length", 411)
                length = int(raw)
                if length > MAX_REVIEW_BYTES:
                    raise BadReviewError(
                        f"{length} bytes is over the {MAX_REVIEW_BYTES}-byte limit", 413, unread=length
                    )
                try:
                    body = self.rfile.read(length)
                except TimeoutError:
                    raise BadReviewError("the request body did not arrive in time", 408) from None
                except OSError as err:
                    raise BadReviewError(f"reading the request body: {err}") from None
                if len(body) < length:
                    raise BadReviewError(f"truncated body: {len(body)} of {length} bytes")
                content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
                if content_type != "application/json":
                    raise BadReviewError(f"contentType={content_type or '(none)'}, expected application/json")
                return body

            def _refuse(self, status: int, message: str, unread: int = 0) -> None:
                body = json.dumps({"error": message}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(body)
                    self.wfile.flush()
                except OSError:
                    return  # the client is gone
                self.close_connection = True
                if unread:
                    self._drain(min(unread, DRAIN_LIMIT_BYTES))

            def _drain(self, left: int) -> None:
                """Read the body the client is still sending (up to a limit, briefly) before the
                connection closes: closing with unread data resets it, and the client may lose the answer."""
                with contextlib.suppress(OSError):
                    self.connection.settimeout(DRAIN_TIMEOUT_S)
                    while left > 0 and (chunk := self.connection.recv(min(left, 1 << 20))):
                        left -= len(chunk)

            def _not_allowed(self) -> None:
                self._refuse(405, f"method {self.command} not allowed: POST an AdmissionReview")

            def do_GET(self) -> None:
                self._not_allowed()

            def do_PUT(self) -> None:
                self._not_allowed()

            def do_DELETE(self) -> None:
                self._not_allowed()

            def do_PATCH(self) -> None:
                self._not_allowed()

            def do_OPTIONS(self) -> None:
                self._not_allowed()

            def do_HEAD(self) -> None:
                self.send_response(405)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ca_pem: bytes | None = None
        if config.cert_file and config.key_file:
            context.load_cert_chain(config.cert_file, config.key_file)
        else:
            self.ca_pem, cert, key = self_signed(list(config.hosts))
            with tempfile.TemporaryDirectory() as d:
                Path(d, "tls.crt").write_bytes(cert)
                Path(d, "tls.key").write_bytes(key)
                context.load_cert_chain(str(Path(d, "tls.crt")), str(Path(d, "tls.key")))
        super().__init__(config.address, Handler, "webhook", context)

    def start(self) -> None:
        super().start()
        if self.ca_pem is not None and self.config.configuration_name:
            # Tried once here, so the CA is in place when start returns; if that fails, retried in
            # the background until it lands: a replica (re)started while the API server is down
            # or restarting must not exit for it, and serves meanwhile.
            try:
                if self.publish_ca():
                    return
            except ApiUnavailableError as err:
                log.warning("webhook: cannot publish the caBundle yet: %s; retrying", err)
            threading.Thread(target=self._publish_until_done, name="webhook-ca", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        super().stop()

    def _publish_until_done(self) -> None:
        delay = PUBLISH_RETRY_FIRST_S
        while not self._stopped.wait(delay):
            delay = min(2 * delay, PUBLISH_RETRY_MAX_S)
            try:
                if self.publish_ca():
                    return
            except ApiUnavailableError as err:
                log.warning("webhook: cannot publish the caBundle yet: %s; retrying in %.0f s", err, delay)

    def publish_ca(self) -> bool:
        """Write the self-generated CA into every webhook of the MutatingWebhookConfiguration;
        False (said in the log) if the API server refused. Raises ApiUnavailableError when
        the API server cannot be reached."""
        path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{self.config.configuration_name}"
        r = self.kube.request("GET", path)
        if not r.ok:
            log.error(
                "webhook: cannot read %s: HTTP %d (pods will stay with their own scheduler)", path, r.status
            )
            return False
        hooks = r.json().get("webhooks") or []
        bundle = base64.b64encode(self.ca_pem or b"").decode()
        patch = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
            for i in range(len(hooks))
        ]
        r = self.kube.request("PATCH", path, body=patch, content_type="application/json-patch+json")
        if not r.ok:
            log.error("webhook: cannot write caBundle into %s: HTTP %d: %s", path, r.status, r.data[:200])
            return False
        log.info("webhook: caBundle written into %s", self.config.configuration_name)
        return True
