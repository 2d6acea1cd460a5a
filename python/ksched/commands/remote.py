"""Reading a running ksched's endpoint for ``ksched status`` and ``ksched shadow report``.

``ksched run`` serves HTTPS and asks the API server who may read what
(:mod:`ksched.loop.serving`), so these commands present the kubeconfig's credentials, a
bearer token or a client certificate, as kubectl would to the API server. The server's
certificate is verified against ``--certificate-authority``; without it, only a loopback
address (``kubectl port-forward``) is read unverified, and any other address is refused unless
``--insecure-skip-tls-verify`` says so. ``--address http://HOST:PORT`` reads a
``ksched run --insecure-serving`` over plain HTTP and sends no credentials.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from ksched.errors import KschedError

# Where `ksched status` and `ksched shadow report` look for a running ksched: `run`'s default address.
DEFAULT_ADDRESS = "127.0.0.1:10259"
# A running ksched answers from memory; anything slower is not answering.
HTTP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Target:
    """Where a running ksched is, and how to talk to it."""

    address: str
    kubeconfig: str | None = None
    certificate_authority: str | None = None
    insecure_skip_tls_verify: bool = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``--address``, ``--kubeconfig`` and the server-certificate flags."""
    p.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        help=f"the running ksched's HOST:PORT, read over HTTPS (default {DEFAULT_ADDRESS}); "
        "http://HOST:PORT reads a `ksched run --insecure-serving` over plain HTTP",
    )
    p.add_argument(
        "--kubeconfig",
        help="whose credentials (token or client certificate) to present; in a pod the service "
        "account, else $KUBECONFIG or ~/.kube/config. The user needs get on the path "
        "(ClusterRole ksched-metrics-reader)",
    )
    add_certificate_arguments(p)


def add_certificate_arguments(p: argparse.ArgumentParser) -> None:
    """The server-certificate flags (``--certificate-authority``, ``--insecure-skip-tls-verify``)."""
    p.add_argument(
        "--certificate-authority",
        metavar="FILE",
        help="PEM CA to verify ksched's serving certificate by (needed for an address that is not loopback)",
    )
    p.add_argument(
        "--insecure-skip-tls-verify",
        action="store_true",
        help="do not verify ksched's serving certificate (the self-signed default) at any address",
    )


def target(args: argparse.Namespace) -> Target:
    return Target(args.address, args.kubeconfig, args.certificate_authority, args.insecure_skip_tls_verify)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split(address: str) -> tuple[str, str, int]:
    """(scheme, host, port) of ``[http://|https://]HOST:PORT``."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "https", address
    if scheme not in ("http", "https"):
        raise KschedError(f"--address {address!r}: expected HOST:PORT, https://HOST:PORT or http://HOST:PORT")
    host, _, port = rest.rstrip("/").rpartition(":")
    if not port.isdigit():
        raise KschedError(f"--address {address!r}: expected HOST:PORT")
    host = host.strip("[]")
    return scheme, host if host not in ("", "0.0.0.0", "::") else "127.0.0.1", int(port)


def _tls(t: Target, host: str, configuration: Any) -> ssl.SSLContext:
    """The client context: the kubeconfig's client certificate, and the server verified as the
    module says."""
    if t.certificate_authority:
        context = ssl.create_default_context(cafile=t.certificate_authority)
    elif t.insecure_skip_tls_verify or _loopback(host):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        raise KschedError(
            f"--address {t.address}: cannot verify ksched's certificate at a non-loopback address: "
            "pass --certificate-authority FILE, or --insecure-skip-tls-verify"
        )
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    return context


def fetch(t: Target, path: str) -> Any:
    """GET ``path`` from the running ksched at ``t`` and decode its JSON."""
    scheme, host, port = _split(t.address)
    url = f"{scheme}://{host if ':' not in host else f'[{host}]'}:{port}{path}"
    headers: dict[str, str] = {}
    context = None
    if scheme == "https":
        # Imported here: it brings the kubernetes client, which plain HTTP does not need.
        from ksched.loop.client import load_configuration

        configuration = load_configuration(t.kubeconfig, 1)
        context = _tls(t, host, configuration)
        settings: dict[str, Any] = dict(configuration.auth_settings())
        for auth in settings.values():  # the token, refreshed as the client does
            if auth.get("in") == "header" and auth.get("value"):
                headers[str(auth["key"])] = str(auth["value"])
    try:
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S, context=context) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as err:
        if err.code == 404 and path == "/shadow":
            raise KschedError(
                f"ksched at {t.address} is not in shadow mode (`ksched run --shadow`)"
            ) from None
        detail = err.read()[:300].decode(errors="replace")
        with contextlib.suppress(ValueError, AttributeError):  # a Status object: its message
            detail = json.loads(detail).get("message", detail)
        raise KschedError(f"{url}: HTTP {err.code}: {detail}".rstrip(": ")) from None
    except (OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        hint = ""
        if isinstance(reason, ssl.SSLError) and "WRONG_VERSION_NUMBER" in str(reason):
            hint = f" (a `ksched run --insecure-serving`? use --address http://{host}:{port})"
        raise KschedError(f"cannot read {url}: {reason}{hint}") from None


def pod_key(pod: str) -> str:
    """``pod`` if it names one pod as ``NAMESPACE/NAME``; else a KschedError."""
    namespace, _, name = pod.partition("/")
    if not namespace or not name or "/" in name:
        raise KschedError(f"{pod!r}: name the pod as NAMESPACE/NAME")
    return pod


def status_path(pod: str | None) -> str:
    """``/status``, asking how the load estimate counts ``pod`` where one is named."""
    return "/status" if pod is None else "/status?" + urllib.parse.urlencode({"pod": pod_key(pod)})


def status(t: Target, pod: str | None = None) -> dict[str, Any]:
    """``/status`` of the running ksched at ``t``; with ``pod``, saying how it counts that pod
    (under ``pod``), else a KschedError."""
    document: dict[str, Any] = fetch(t, status_path(pod))
    if pod is not None and not isinstance(document.get("pod"), dict):
        raise KschedError(f"ksched at {t.address} does not say how it counts a pod: it predates --pod")
    return document


def pod_status(t: Target, pod: str) -> dict[str, Any]:
    """How the running ksched at ``t`` counts ``pod`` (``/status?pod=``)."""
    answer: dict[str, Any] = status(t, pod)["pod"]
    return answer
