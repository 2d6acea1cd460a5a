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
certificate whose CA is written into the configuration's ``caBundle``. Replicas
behind one Service share one self-generated certificate through a Secret
(``secretName``): each uses the Secret's certificate when it names every host and
is valid for RENEW_BEFORE_DAYS more days, else generates one and creates or
replaces the Secret (a conflict means another replica wrote first: it reads theirs).
Every replica then writes the same CA into the ``caBundle``, so the API server
trusts whichever replica the Service picks. Until a replica has read the Secret
(the API server unreachable at start), it serves a certificate of its own whose
CA it never publishes, so reviews sent to it fail TLS and ``failurePolicy:
Ignore`` admits those pods unchanged; it retries in the background, then serves
the shared certificate to new connections and publishes its CA. Without a
Secret each replica generates and publishes its own CA, which suits one replica only.
Each connection is handed the certificate served when it arrives, on its own thread
(:class:`~ksched.loop.server.BackgroundServer` asks for the TLS context per connection).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import ipaddress
import json
import logging
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from ksched.config import WebhookConfig
from ksched.loop import server
from ksched.loop.client import ApiUnavailableError, Kube
from ksched.loop.server import BackgroundServer, tls_context
from ksched.objects import DEFAULT_SCHEDULER, Obj, meta, spec, uses_resource_claims

log = logging.getLogger(__name__)

CERT_DAYS = 365
# A shared certificate closer to its end is replaced at start: a replica started then still
# has a month before its certificate lapses (replicas read the Secret only when they start).
RENEW_BEFORE_DAYS = 30
# Writes of the Secret that lose to another replica's (409) before the next retry.
SECRET_ATTEMPTS = 3
SECRET_KEYS = ("ca.crt", "tls.crt", "tls.key")
REVIEW_API_VERSION = "admission.k8s.io/v1"
# The API server's request bodies are at most 3 MiB; a review holds the object and its old version.
MAX_REVIEW_BYTES = 8 * 1024 * 1024
# The API server sends a review at once, and waits 10 s for a webhook by default (timeoutSeconds).
# Passed to the server, which sets it on each connection's socket.
READ_TIMEOUT_S = 10.0
DRAIN_TIMEOUT_S = 1.0
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024
# Reading the shared certificate and publishing the CA are retried until they land: first
# after a second, doubling up to 30 s.
PUBLISH_RETRY_FIRST_S = 1.0
PUBLISH_RETRY_MAX_S = 30.0
# Marks pods the webhook routed, so operators can tell them from pods that asked for ksched.
ROUTED_ANNOTATION = "ksched.io/routed-by"
# The common name of the CA the webhook generates.
WEBHOOK_CA = "ksched-webhook-ca"


def self_signed(hosts: list[str]) -> tuple[bytes, bytes, bytes]:
    """The webhook's CA, and a serving certificate for ``hosts`` signed by it, valid CERT_DAYS:
    (ca_pem, cert_pem, key_pem)."""
    return server.self_signed(hosts, WEBHOOK_CA, CERT_DAYS)


def shared_certificate(secret: Obj, hosts: list[str], now: dt.datetime) -> tuple[bytes, bytes, bytes] | str:
    """The (ca_pem, cert_pem, key_pem) in a Secret's data if a replica may serve them: the
    CA signed the certificate, the key is the certificate's, every host is among its names and
    it is valid for RENEW_BEFORE_DAYS more days. Else why not."""
    data = secret.get("data") or {}
    missing = [k for k in SECRET_KEYS if not data.get(k)]
    if missing:
        return f"no {', '.join(missing)}"
    try:
        ca_pem, cert_pem, key_pem = (base64.b64decode(data[k], validate=True) for k in SECRET_KEYS)
        ca = x509.load_pem_x509_certificate(ca_pem)
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, None)
        cert.verify_directly_issued_by(ca)
    except (TypeError, ValueError, InvalidSignature) as err:
        return f"not a certificate signed by its CA, with its key: {err}"
    raw = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*raw) != cert.public_key().public_bytes(*raw):
        return "tls.key is not the key of tls.crt"
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "a certificate without names"
    dns = {n.lower() for n in names.get_values_for_type(x509.DNSName)}
    ips = set(names.get_values_for_type(x509.IPAddress))
    for h in hosts:
        try:
            named = ipaddress.ip_address(h) in ips
        except ValueError:
            named = h.lower() in dns
        if not named:
            return f"a certificate that does not name {h}"
    if cert.not_valid_before_utc > now:
        return f"a certificate valid only from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
    if cert.not_valid_after_utc - now < dt.timedelta(days=RENEW_BEFORE_DAYS):
        return f"a certificate that expires {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    return ca_pem, cert_pem, key_pem


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


class ReviewHandler(BaseHTTPRequestHandler):
    """Answers AdmissionReviews POSTed to it with :meth:`answer`; refuses anything else with a
    JSON error, and reads off what a refused client is still sending before closing. A body
    that stops arriving for READ_TIMEOUT_S (the socket's timeout, set by the server) is answered 408."""

    def do_POST(self) -> None:
        try:
            review = parse_review(self._body())
            response = self.answer(review)
        except BadReviewError as err:
            self._refuse(err.status, str(err), err.unread)
            return
        body = json.dumps(response).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def answer(self, review: dict[str, Any]) -> dict[str, Any]:
        """The response to a parsed review (the :class:`Webhook` this handler serves says)."""
        raise NotImplementedError

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


class Webhook(BackgroundServer):
    def __init__(
        self, config: WebhookConfig, scheduler: str, can_route: Callable[[Obj], bool], kube: Kube
    ) -> None:
        self.config = config
        self.scheduler = scheduler
        self.can_route = can_route
        self.kube = kube
        self._stopped = threading.Event()
        webhook = self

        class Handler(ReviewHandler):
            def answer(self, review: dict[str, Any]) -> dict[str, Any]:
                return review_response(review, webhook.scheduler, webhook.can_route)

        # The CA of the self-generated certificate served now (None: a certificate from files).
        self.ca_pem: bytes | None = None
        # Whether the certificate served now is the one the replicas share through the Secret.
        self.shared = False
        if config.cert_file and config.key_file:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(config.cert_file, config.key_file)
        else:
            self.ca_pem, cert, key = self_signed(list(config.hosts))
            context = tls_context(cert, key)
        # The context of new connections: replaced when the shared certificate is read.
        self._serving = context
        super().__init__(config.address, Handler, "webhook", lambda: self._serving, READ_TIMEOUT_S)

    def start(self) -> None:
        super().start()
        if self.ca_pem is not None:
            # Tried once here, so the shared certificate is served and its CA in place when
            # start returns; if that fails, retried in the background until it lands: a replica
            # (re)started while the API server is down or restarting must not exit for it, and
            # serves meanwhile.
            try:
                if self.settle():
                    return
            except ApiUnavailableError as err:
                log.warning("webhook: cannot reach the API server for the certificate yet: %s; retrying", err)
            threading.Thread(target=self._settle_until_done, name="webhook-ca", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        super().stop()

    def _settle_until_done(self) -> None:
        delay = PUBLISH_RETRY_FIRST_S
        while not self._stopped.wait(delay):
            delay = min(2 * delay, PUBLISH_RETRY_MAX_S)
            try:
                if self.settle():
                    return
            except ApiUnavailableError as err:
                log.warning(
                    "webhook: cannot reach the API server for the certificate yet: %s; retrying in %.0f s",
                    err,
                    delay,
                )

    def settle(self) -> bool:
        """Serve the shared certificate (with a Secret configured), then publish its CA (with a
        configuration named); True once both are done. False (said in the log) if the API server
        refused; raises ApiUnavailableError when it cannot be reached."""
        if self.config.secret_name and not self.shared and not self.adopt_shared_certificate():
            return False
        return not self.config.configuration_name or self.publish_ca()

    def adopt_shared_certificate(self) -> bool:
        """Serve the certificate the replicas share: the Secret's when usable, else a new one
        this replica writes there (create, or replace the unusable one at its resourceVersion;
        409 means another replica wrote first: read theirs). False (said in the log) if the
        API server refused; raises ApiUnavailableError when it cannot be reached."""
        ns, name, hosts = self.config.secret_namespace, self.config.secret_name, list(self.config.hosts)
        path = f"/api/v1/namespaces/{ns}/secrets/{name}"
        for _ in range(SECRET_ATTEMPTS):
            r = self.kube.request("GET", path)
            if not r.ok and r.status != 404:
                log.error(
                    "webhook: cannot read Secret %s/%s: HTTP %d: %s (ksched's Role needs get and update "
                    "on it and create on Secrets, as in deploy/rbac.yaml; until then pods stay with "
                    "their own scheduler)",
                    ns,
                    name,
                    r.status,
                    r.data[:200],
                )
                return False
            secret: Obj | None = r.json() if r.ok else None
            if secret is not None:
                found = shared_certificate(secret, hosts, dt.datetime.now(dt.UTC))
                if not isinstance(found, str):
                    self._serve(*found)
                    log.info("webhook: serving the certificate of Secret %s/%s", ns, name)
                    return True
                log.info("webhook: Secret %s/%s holds %s; replacing it", ns, name, found)
            pems = self_signed(hosts)
            data = {k: base64.b64encode(v).decode() for k, v in zip(SECRET_KEYS, pems, strict=True)}
            if secret is None:
                body = {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": name, "namespace": ns},
                    "type": "kubernetes.io/tls",
                    "data": data,
                }
                r = self.kube.request("POST", f"/api/v1/namespaces/{ns}/secrets", body=body)
            else:
                # The resourceVersion read makes this a compare-and-swap.
                r = self.kube.request("PUT", path, body={**secret, "data": data})
            if r.ok:
                self._serve(*pems)
                log.info("webhook: wrote a new certificate into Secret %s/%s", ns, name)
                return True
            if r.status != 409:
                log.error("webhook: cannot write Secret %s/%s: HTTP %d: %s", ns, name, r.status, r.data[:200])
                return False
        log.warning("webhook: Secret %s/%s changed under each of %d writes", ns, name, SECRET_ATTEMPTS)
        return False

    def _serve(self, ca_pem: bytes, cert_pem: bytes, key_pem: bytes) -> None:
        self.ca_pem = ca_pem
        self._serving = tls_context(cert_pem, key_pem)
        self.shared = True

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
