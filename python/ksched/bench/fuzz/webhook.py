"""The webhook phase: malformed AdmissionReview requests sent straight to the webhook;
each must be answered, never with a 5xx, and the webhook must keep answering."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from ksched.bench.fuzz.report import NAMESPACE, FuzzReport
from ksched.objects import Obj


def review(obj: Any = None, uid: Any = "fuzz-uid", **request: Any) -> Obj:
    """An AdmissionReview for a pod CREATE (``obj`` the pod), with ``request`` fields overridden."""
    pod = obj if obj is not None else {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}}
    req: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "namespace": NAMESPACE,
        "object": pod,
        **request,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def _j(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def malformed_requests() -> list[tuple[str, str, dict[str, str], bytes, str]]:
    """(name, method, headers, body, how): ``how`` is ``send`` (whole body, right length),
    ``short`` (a longer Content-Length than sent, then nothing: the webhook times out), or ``raw``
    (``headers`` sent exactly as given, no Content-Length added)."""
    js = {"Content-Type": "application/json"}
    good = review()
    cases: list[tuple[str, str, dict[str, str], bytes, str]] = [
        ("valid review", "POST", js, _j(good), "send"),
        ("empty body", "POST", js, b"", "send"),
        ("not JSON", "POST", js, b"not json at all", "send"),
        ("truncated JSON", "POST", js, _j(good)[:37], "send"),
        ("invalid UTF-8", "POST", js, b'{"kind": "\xff\xfe"}', "send"),
        ("JSON null", "POST", js, b"null", "send"),
        ("JSON list", "POST", js, b"[]", "send"),
        ("JSON number", "POST", js, b"12", "send"),
        ("JSON string", "POST", js, b'"AdmissionReview"', "send"),
        ("empty object", "POST", js, b"{}", "send"),
        ("NaN and Infinity", "POST", js, _j(good).replace(b'"fuzz-uid"', b"NaN", 1), "send"),
        ("deep nesting", "POST", js, b"[" * 100000 + b"]" * 100000, "send"),
        ("deep object", "POST", js, b'{"request":' * 50000 + b"1" + b"}" * 50000, "send"),
        ("wrong kind", "POST", js, _j({**good, "kind": "Pod"}), "send"),
        ("no kind", "POST", js, _j({k: v for k, v in good.items() if k != "kind"}), "send"),
        ("wrong apiVersion", "POST", js, _j({**good, "apiVersion": "admission.k8s.io/v2"}), "send"),
        ("v1beta1 apiVersion", "POST", js, _j({**good, "apiVersion": "admission.k8s.io/v1beta1"}), "send"),
        ("apiVersion number", "POST", js, _j({**good, "apiVersion": 1}), "send"),
        ("no request", "POST", js, _j({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), "send"),
        ("request null", "POST", js, _j({**good, "request": None}), "send"),
        ("request list", "POST", js, _j({**good, "request": [good["request"]]}), "send"),
        ("request string", "POST", js, _j({**good, "request": "x"}), "send"),
        ("no uid", "POST", js, _j(review(uid=None)), "send"),
        ("uid number", "POST", js, _j(review(uid=5)), "send"),
        ("uid list", "POST", js, _j(review(uid=["a"])), "send"),
        ("uid empty", "POST", js, _j(review(uid="")), "send"),
        ("uid huge", "POST", js, _j(review(uid="u" * 1_000_000)), "send"),
        ("no object", "POST", js, _j({**good, "request": {"uid": "u", "operation": "CREATE"}}), "send"),
        ("object null", "POST", js, _j(review(object=None)), "send"),
        ("object list", "POST", js, _j(review(object=[1, 2])), "send"),
        ("object string", "POST", js, _j(review(object="pod")), "send"),
        ("object number", "POST", js, _j(review(object=7)), "send"),
        ("spec list", "POST", js, _j(review({"spec": []})), "send"),
        ("spec string", "POST", js, _j(review({"spec": "x"})), "send"),
        ("metadata string", "POST", js, _j(review({"metadata": "x", "spec": {}})), "send"),
        ("annotations list", "POST", js, _j(review({"metadata": {"annotations": ["a"]}, "spec": {}})), "send"),
        ("annotations string", "POST", js, _j(review({"metadata": {"annotations": "a"}, "spec": {}})), "send"),
        ("schedulerName number", "POST", js, _j(review({"spec": {"schedulerName": 5}})), "send"),
        ("schedulerName list", "POST", js, _j(review({"spec": {"schedulerName": []}})), "send"),
        ("resourceClaims string", "POST", js, _j(review({"spec": {"resourceClaims": "x"}})), "send"),
        ("resourceClaims numbers", "POST", js, _j(review({"spec": {"resourceClaims": [1, None]}})), "send"),
        ("operation DELETE", "POST", js, _j(review(operation="DELETE")), "send"),
        ("operation UPDATE", "POST", js, _j(review(operation="UPDATE", oldObject={"spec": {}})), "send"),
        ("operation number", "POST", js, _j(review(operation=5)), "send"),
        ("kind of request Deployment", "POST", js, _j(review(kind={"group": "apps", "version": "v1", "kind": "Deployment"})), "send"),
        ("unicode pod", "POST", js, _j(review({"metadata": {"name": "😀ü", "annotations": {"ключ": "日本語"}}, "spec": {"schedulerName": ""}})), "send"),
        ("huge body 20 MiB", "POST", js, _j(review({"metadata": {"annotations": {"a": "x" * (20 << 20)}}, "spec": {}})), "send"),
        ("content type text/plain", "POST", {"Content-Type": "text/plain"}, _j(good), "send"),
        ("content type form", "POST", {"Content-Type": "application/x-www-form-urlencoded"}, _j(good), "send"),
        ("no content type", "POST", {}, _j(good), "send"),
        ("short body", "POST", js, _j(good), "short"),
        ("Content-Length not a number", "POST", {**js, "Content-Length": "abc"}, _j(good), "raw"),
        ("Content-Length negative", "POST", {**js, "Content-Length": "-5"}, _j(good), "raw"),
        ("Content-Length huge", "POST", {**js, "Content-Length": str(1 << 40)}, _j(good), "raw"),
        ("no Content-Length", "POST", js, _j(good), "raw"),
        (
            "chunked",
            "POST",
            {**js, "Transfer-Encoding": "chunked"},
            f"{len(_j(good)):x}\r\n".encode() + _j(good) + b"\r\n0\r\n\r\n",
            "raw",
        ),
        ("GET", "GET", {}, b"", "send"),
        ("PUT", "PUT", js, _j(good), "send"),
        ("DELETE", "DELETE", {}, b"", "send"),
        ("PATCH", "PATCH", js, _j(good), "send"),
        ("HEAD", "HEAD", {}, b"", "send"),
        ("OPTIONS", "OPTIONS", {}, b"", "send"),
        ("other path", "POST", js, _j(good), "send"),
    ]  # fmt: skip
    return cases


def _exchange(
    port: int, method: str, path: str, headers: dict[str, str], body: bytes, how: str
) -> tuple[int, bytes]:
    """One request over TLS: (status, body); status 0 when no HTTP answer came back."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if how == "send":
        head.append(f"Content-Length: {len(body)}")
    elif how == "short":
        head.append(f"Content-Length: {len(body) + 1000}")
    head += [f"{k}: {v}" for k, v in headers.items()]
    data = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    chunks: list[bytes] = []
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
            context.wrap_socket(raw) as s,
        ):
            with contextlib.suppress(OSError):  # the server may answer before reading a huge body
                s.sendall(data)
            while True:
                try:
                    chunk = s.recv(65536)
                except OSError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError:
        return 0, b""
    reply = b"".join(chunks)
    try:
        status = int(reply.split(b"\r\n", 1)[0].split()[1])
    except (IndexError, ValueError):
        return 0, reply[:200]
    return status, reply.split(b"\r\n\r\n", 1)[-1]


def _check_answer(report: FuzzReport, name: str, status: int, body: bytes, sent: bytes) -> None:
    if status == 0:
        report.defect("webhook", None, f"{name}: no HTTP answer")
    elif status >= 500:
        report.defect("webhook", None, f"{name}: HTTP {status}: {body[:200]!r}")
    elif status == 200:
        try:
            answer = json.loads(body)
            response = answer["response"]
            uid = json.loads(sent)["request"]["uid"]
        except (ValueError, KeyError, TypeError) as err:
            report.defect(
                "webhook",
                None,
                f"{name}: HTTP 200 that is not an AdmissionReview answer ({err}): {body[:200]!r}",
            )
            return
        if answer.get("kind") != "AdmissionReview" or not isinstance(response.get("allowed"), bool):
            report.defect("webhook", None, f"{name}: malformed AdmissionReview answer: {body[:200]!r}")
        elif not isinstance(uid, str) or not uid or response.get("uid") != uid:
            report.defect(
                "webhook",
                None,
                f"{name}: answered uid {response.get('uid')!r} to a request uid {str(uid)[:40]!r}",
            )
        elif "patch" in response:
            try:
                patch = json.loads(base64.b64decode(response["patch"]))
                assert isinstance(patch, list)
            except (ValueError, AssertionError):
                report.defect("webhook", None, f"{name}: patch is not a base64 JSON patch")


def webhook_phase(report: FuzzReport, port: int, healthy: Callable[[], bool]) -> None:
    """Malformed requests straight at the webhook on ``port``; after each, a valid review must be
    answered, and at the end ``healthy`` must hold."""
    good = _j(review())
    for name, method, headers, body, how in malformed_requests():
        path = "/other" if name == "other path" else "/mutate"
        started = time.monotonic()
        status, answer = _exchange(port, method, path, headers, body, how)
        report.webhook_seconds[name] = time.monotonic() - started
        report.webhook_requests += 1
        report.webhook_status[status] += 1
        _check_answer(report, name, status, answer, body)
        ok, answer = _exchange(port, "POST", "/mutate", {"Content-Type": "application/json"}, good, "send")
        if ok != 200:
            report.defect(
                "webhook", None, f"after {name}: a valid review answered HTTP {ok}: {answer[:200]!r}"
            )
    # Stalled clients: connections that never finish their body must not stop the webhook.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    stalled = []
    try:
        for _ in range(50):
            s = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10))
            s.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
            stalled.append(s)
        report.webhook_requests += 50
        started = time.monotonic()
        ok, answer = _exchange(port, "POST", "/mutate", {"Content-Type": "application/json"}, good, "send")
        if ok != 200 or time.monotonic() - started > 5:
            report.defect("webhook", None, f"with 50 stalled clients: a valid review answered HTTP {ok}")
    except OSError as err:
        report.defect("webhook", None, f"stalled clients: {err}")
    finally:
        for s in stalled:
            s.close()
    if not healthy():
        report.defect("webhook", None, "ksched is not healthy after the webhook requests")
