"""The webhook's self-signed CA reaches its MutatingWebhookConfiguration even when the API
server is down when ksched starts (the chaos soak found a replica restarted during an API
server restart exiting with "error: ... connection refused" instead of serving)."""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any

import pytest

from ksched.cluster.local import free_port
from ksched.config import WebhookConfig
from ksched.loop.client import ApiUnavailableError, Response
from ksched.loop.scheduling import webhook as webhook_module
from ksched.loop.scheduling.webhook import Webhook

CONFIG_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/ksched"


class FlakyApi:
    """Unreachable for the first ``down`` requests, then a configuration with two webhooks."""

    def __init__(self, down: int) -> None:
        self.down = down
        self.calls: list[tuple[str, str]] = []
        self.patched = threading.Event()
        self.patch: Any = None

    def request(self, method: str, path: str, body: Any = None, content_type: str = "") -> Response:
        self.calls.append((method, path))
        if self.down > 0:
            self.down -= 1
            raise ApiUnavailableError("connection refused")
        assert path == CONFIG_PATH
        if method == "GET":
            return Response(200, json.dumps({"webhooks": [{"name": "a"}, {"name": "b"}]}).encode())
        self.patch = body
        self.patched.set()
        return Response(200, b"{}")


def hook(api: FlakyApi) -> Webhook:
    # A certificate per replica: the Secret a shared one goes through is test_webhook_secret's.
    config = WebhookConfig(
        enabled=True,
        address=f"127.0.0.1:{free_port()}",
        hosts=("127.0.0.1",),
        configuration_name="ksched",
        secret_name=None,
    )
    return Webhook(config, "ksched", lambda pod: True, api)  # type: ignore[arg-type]


def bundles(api: FlakyApi) -> list[str]:
    return [op["value"] for op in api.patch]


def test_ca_is_published_before_start_returns_when_the_api_server_answers() -> None:
    api = FlakyApi(down=0)
    w = hook(api)
    w.start()
    try:
        assert api.patched.is_set()
        assert bundles(api) == [base64.b64encode(w.ca_pem or b"").decode()] * 2
    finally:
        w.stop()


def test_start_survives_an_unreachable_api_server_and_publishes_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(webhook_module, "PUBLISH_RETRY_FIRST_S", 0.05)
    api = FlakyApi(down=3)
    w = hook(api)
    started = time.monotonic()
    w.start()  # raised ApiUnavailableError before, and `ksched run` exited 2
    try:
        assert time.monotonic() - started < 1.0
        assert api.patched.wait(5), api.calls
        assert bundles(api) == [base64.b64encode(w.ca_pem or b"").decode()] * 2
        assert len(api.calls) == 3 + 2  # three refused GETs, then one GET and one PATCH
    finally:
        w.stop()


def test_stop_ends_the_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhook_module, "PUBLISH_RETRY_FIRST_S", 0.05)
    api = FlakyApi(down=10**9)
    w = hook(api)
    w.start()
    time.sleep(0.3)
    w.stop()
    time.sleep(0.2)
    calls = len(api.calls)
    time.sleep(0.5)
    assert len(api.calls) == calls and not api.patched.is_set()
