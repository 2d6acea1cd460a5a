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
import datetime as dt
import ipaddress
import json
import logging
import ssl
import tempfile
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ksched.config import WebhookConfig
from ksched.loop.client import Kube
from ksched.loop.server import BackgroundServer
from ksched.objects import DEFAULT_SCHEDULER, Obj, uses_resource_claims

log = logging.getLogger(__name__)

CERT_DAYS = 365
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


def review_response(review: dict[str, Any], scheduler: str, route: bool) -> dict[str, Any]:
    """The AdmissionReview answer: allowed always; a patch only when routing a pod ksched can place."""
    request = review.get("request") or {}
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    pod = request.get("object") or {}
    current = (pod.get("spec") or {}).get("schedulerName")
    if (
        route
        and request.get("operation") == "CREATE"
        and current in (None, "", DEFAULT_SCHEDULER)
        and not uses_resource_claims(pod)
    ):
        patch: list[dict[str, Any]] = [{"op": "add", "path": "/spec/schedulerName", "value": scheduler}]
        if not (pod.get("metadata") or {}).get("annotations"):
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
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    review = json.loads(self.rfile.read(length))
                    pod = (review.get("request") or {}).get("object") or {}
                    answer = review_response(review, outer.scheduler, outer.can_route(pod))
                except (ValueError, AttributeError) as err:
                    self.send_error(400, f"not an AdmissionReview: {err}")
                    return
                body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

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
            self.publish_ca()

    def publish_ca(self) -> None:
        """Write the self-generated CA into every webhook of the MutatingWebhookConfiguration."""
        path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{self.config.configuration_name}"
        r = self.kube.request("GET", path)
        if not r.ok:
            log.error(
                "webhook: cannot read %s: HTTP %d (pods will stay with their own scheduler)", path, r.status
            )
            return
        hooks = r.json().get("webhooks") or []
        bundle = base64.b64encode(self.ca_pem or b"").decode()
        patch = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
            for i in range(len(hooks))
        ]
        r = self.kube.request("PATCH", path, body=patch, content_type="application/json-patch+json")
        if not r.ok:
            log.error("webhook: cannot write caBundle into %s: HTTP %d: %s", path, r.status, r.data[:200])
        else:
            log.info("webhook: caBundle written into %s", self.config.configuration_name)
