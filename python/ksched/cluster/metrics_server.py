"""metrics-server behind kube-apiserver's aggregation layer, serving ``metrics.k8s.io`` for the
load simulation (:mod:`~ksched.cluster.load`): the certificates the aggregation layer needs
(:func:`make_certificates`), kube-apiserver's flags for it (:func:`apiserver_args`), starting
metrics-server on loopback and registering its APIService (:func:`start_metrics_server`).
Never names an address other than loopback.
"""

from __future__ import annotations

import base64
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksched.cluster.build import Pins, metrics_server_binary
from ksched.cluster.load import LoadSimulation, go_duration
from ksched.cluster.processes import ClusterError, Launcher, free_port, http_ok, kubectl

METRICS_API_SERVICE = "v1beta1.metrics.k8s.io"
METRICS_SERVER_SERVICE = ("kube-system", "metrics-server")
FRONT_PROXY_CLIENT = "front-proxy-client"


@dataclass(frozen=True)
class Certificates:
    """The aggregation layer's certificates, under the cluster's state directory.

    kube-apiserver proxies to metrics-server with the front-proxy client certificate, which
    metrics-server trusts through the front-proxy CA that kube-apiserver publishes; the
    APIService trusts metrics-server's serving certificate through the serving CA. The
    client CA signs nothing: kube-apiserver publishes it beside the front-proxy CA because
    extension API servers expect one (metrics-server logs an error every resync without)."""

    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, check=False)
    if proc.returncode != 0:
        raise ClusterError(f"openssl {args[0]} failed: {proc.stderr.decode()[-2000:]}")


_EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _issue(certs: Certificates, ca: str, name: str, subject: str, extensions: str) -> None:
    ext = certs.path(f"{name}.ext")
    ext.write_text(extensions)
    csr = certs.path(f"{name}.csr")
    _openssl("req", *_EC_KEY, "-keyout", str(certs.path(f"{name}.key")), "-out", str(csr), "-subj", subject)
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(certs.path(f"{ca}.crt")),
        "-CAkey", str(certs.path(f"{ca}.key")), "-CAcreateserial", "-days", "3650",
        "-extfile", str(ext), "-out", str(certs.path(f"{name}.crt")),
    )  # fmt: skip


def make_certificates(directory: Path) -> Certificates:
    """Three CAs and the two certificates they sign, made with openssl."""
    certs = Certificates(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for ca in ("front-proxy-ca", "serving-ca", "client-ca"):
        _openssl(
            "req", "-x509", *_EC_KEY, "-keyout", str(certs.path(f"{ca}.key")),
            "-out", str(certs.path(f"{ca}.crt")), "-days", "3650", "-subj", f"/CN=ksched-local-{ca}",
        )  # fmt: skip
    leaf = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    _issue(
        certs,
        "front-proxy-ca",
        FRONT_PROXY_CLIENT,
        f"/CN={FRONT_PROXY_CLIENT}",
        leaf + "extendedKeyUsage=clientAuth\n",
    )
    namespace, name = METRICS_SERVER_SERVICE
    _issue(
        certs,
        "serving-ca",
        "metrics-server",
        f"/CN={name}.{namespace}.svc",
        leaf
        + f"extendedKeyUsage=serverAuth\nsubjectAltName=DNS:{name}.{namespace}.svc,DNS:localhost,IP:127.0.0.1\n",
    )
    return certs


def apiserver_args(certs: Certificates) -> list[str]:
    """kube-apiserver's aggregation-layer flags: who may assert identities to an extension
    API server (the front-proxy client), and the certificate it proxies with."""
    return [
        f"--client-ca-file={certs.path('client-ca.crt')}",
        f"--requestheader-client-ca-file={certs.path('front-proxy-ca.crt')}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={certs.path(f'{FRONT_PROXY_CLIENT}.crt')}",
        f"--proxy-client-key-file={certs.path(f'{FRONT_PROXY_CLIENT}.key')}",
    ]


def metrics_server_args(
    kubeconfig: str, port: int, certs: Certificates, simulation: LoadSimulation
) -> list[str]:
    """metrics-server on loopback: it reads the fake nodes (``type=kwok``) at the address and
    port they advertise, on the path their annotation names, trusting KWOK's test certificate."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={certs.path('metrics-server.crt')}",
        f"--tls-private-key-file={certs.path('metrics-server.key')}",
        "--kubelet-preferred-address-types=InternalIP",
        "--kubelet-use-node-status-port",
        "--kubelet-insecure-tls",
        "--node-selector=type=kwok",
        f"--metric-resolution={go_duration(simulation.metric_resolution_s)}",
        # metrics-server wants a scrape to end well within its resolution; KWOK is on loopback.
        f"--kubelet-request-timeout={go_duration(simulation.metric_resolution_s / 2)}",
    ]


def start_metrics_server(launcher: Launcher, certs: Certificates, simulation: LoadSimulation) -> None:
    """Start metrics-server on loopback and register it for ``metrics.k8s.io``; waits until
    kube-apiserver reports the APIService Available (it reached metrics-server through the
    aggregation layer)."""
    state, bin_dir = launcher.state, launcher.bin
    port = free_port()
    state.ports["metrics-server"] = port
    args = metrics_server_args(state.kubeconfig, port, certs, simulation)
    launcher.start("metrics-server", metrics_server_binary(Pins()), args)
    launcher.wait("metrics-server /livez", lambda: http_ok(f"https://127.0.0.1:{port}/livez"))
    objects = json.dumps(metrics_api_objects(port, certs)).encode()
    applied = kubectl(state, bin_dir, "apply", "-f", "-", input_=objects)
    if applied.returncode != 0:
        raise ClusterError(f"registering metrics-server failed: {applied.stderr.decode()[-2000:]}")
    launcher.wait(
        f"the APIService {METRICS_API_SERVICE} to be Available",
        lambda: (
            kubectl(
                state,
                bin_dir,
                "wait",
                "--for=condition=Available",
                "--timeout=5s",
                f"apiservice/{METRICS_API_SERVICE}",
            ).returncode
            == 0
        ),
    )


def metrics_api_objects(port: int, certs: Certificates) -> dict[str, Any]:
    """The Service and APIService that register metrics-server for ``metrics.k8s.io``.

    The Service is an ExternalName for ``localhost``: kube-apiserver resolves it to the
    loopback address metrics-server listens on, with no service proxy in between."""
    namespace, name = METRICS_SERVER_SERVICE
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "type": "ExternalName",
            "externalName": "localhost",
            "ports": [{"name": "https", "port": port}],
        },
    }
    api_service = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": METRICS_API_SERVICE},
        "spec": {
            "group": "metrics.k8s.io",
            "version": "v1beta1",
            "service": {"namespace": namespace, "name": name, "port": port},
            "caBundle": base64.b64encode(certs.path("serving-ca.crt").read_bytes()).decode(),
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }
    return {"apiVersion": "v1", "kind": "List", "items": [service, api_service]}
