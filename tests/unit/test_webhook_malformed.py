"""Malformed requests at the webhook (`ksched bench --fuzz` found these): every one is answered,
never with a 5xx, and the webhook keeps answering valid reviews."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest

from ksched.bench.fuzz.report import FuzzReport
from ksched.bench.fuzz.webhook import _exchange, malformed_requests, review, webhook_phase
from ksched.cluster.local import free_port
from ksched.config import WebhookConfig
from ksched.loop.scheduling import webhook as webhook_module
from ksched.loop.scheduling.webhook import Webhook

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with pytest.MonkeyPatch.context() as mp:
        # A stalled body is answered 408 after the read timeout: 1 s here instead of 10 s.
        mp.setattr(webhook_module, "READ_TIMEOUT_S", 1.0)
        port = free_port()
        config = WebhookConfig(
            enabled=True,
            address=f"127.0.0.1:{port}",
            hosts=("127.0.0.1",),
            configuration_name=None,
            secret_name=None,
        )
        hook = Webhook(config, "ksched", lambda pod: True, None)  # type: ignore[arg-type]
    hook.start()
    yield port
    hook.stop()


def post(
    port: int, body: bytes, headers: dict[str, str] | None = None, how: str = "send"
) -> tuple[int, bytes]:
    return _exchange(port, "POST", "/mutate", JSON if headers is None else headers, body, how)


@pytest.mark.parametrize(
    ("name", "body", "headers", "how", "status"),
    [
        # Each of these got no answer at all (the handler raised) or a 5xx before.
        ("deep nesting: RecursionError", b"[" * 100000 + b"]" * 100000, JSON, "send", 400),
        ("Content-Length not a number: ValueError", b"{}", {**JSON, "Content-Length": "abc"}, "raw", 411),
        ("Content-Length of 1 TiB: MemoryError", b"{}", {**JSON, "Content-Length": str(1 << 40)}, "raw", 413),
        ("a body that never arrives: a thread waiting forever", b"{", JSON, "short", 408),
        # Answered 200 with a uid the API server would refuse, or patched a non-pod.
        ("no request", json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), JSON, "send", 400),
        ("no uid", json.dumps(review(uid=None)).encode(), JSON, "send", 400),
        ("uid a number", json.dumps(review(uid=5)).encode(), JSON, "send", 400),
        ("NaN uid", json.dumps(review()).replace('"fuzz-uid"', "NaN").encode(), JSON, "send", 400),
        ("not an AdmissionReview", json.dumps({**review(), "kind": "Pod"}).encode(), JSON, "send", 400),
        ("text/plain", json.dumps(review()).encode(), {"Content-Type": "text/plain"}, "send", 400),
    ],
)  # fmt: skip
def test_malformed_request_is_refused_with_a_4xx(
    port: int, name: str, body: bytes, headers: dict[str, str], how: str, status: int
) -> None:
    got, answer = post(port, body, headers, how)
    assert got == status, f"{name}: {answer[:200]!r}"
    assert json.loads(answer)["error"], "the refusal says why"
    assert post(port, json.dumps(review()).encode())[0] == 200, "still answering"


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])
def test_other_methods_are_405_not_501(port: int, method: str) -> None:
    assert _exchange(port, method, "/mutate", {}, b"", "send")[0] == 405


@pytest.mark.parametrize(
    ("name", "obj", "kind"),
    [
        ("object a list", [1, 2], "Pod"),
        ("object a string", "pod", "Pod"),
        ("spec a list", {"metadata": {}, "spec": []}, "Pod"),
        ("annotations a list", {"metadata": {"annotations": ["a"]}, "spec": {}}, "Pod"),
        ("a Deployment", {"metadata": {}, "spec": {}}, "Deployment"),
    ],
)
def test_a_review_of_what_is_not_a_routable_pod_is_allowed_unchanged(
    port: int, name: str, obj: object, kind: str
) -> None:
    body = json.dumps(review(obj, kind={"group": "", "version": "v1", "kind": kind})).encode()
    status, answer = post(port, body)
    assert status == 200, name
    response = json.loads(answer)["response"]
    assert response == {"uid": "fuzz-uid", "allowed": True}, name


def test_a_plain_pod_is_still_routed(port: int) -> None:
    status, answer = post(port, json.dumps(review({"metadata": {"name": "p"}, "spec": {}})).encode())
    assert status == 200
    response = json.loads(answer)["response"]
    patch = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "ksched"} in patch


def test_every_fuzz_case_is_answered_without_a_5xx(port: int) -> None:
    report = FuzzReport(seed=0, specs=0)
    webhook_phase(report, port, lambda: True)
    assert report.webhook_requests == len(malformed_requests()) + 50
    assert [d.detail for d in report.defects] == []
    assert not [s for s in report.webhook_status if s == 0 or s >= 500]
