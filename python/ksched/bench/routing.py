"""Routing a harness's pods through ksched's webhook: the MutatingWebhookConfiguration that
sends a labelled namespace's new pods to a ksched on loopback, and the wait until the API
server really calls it (it must first read the CA ksched writes into the configuration)."""

from __future__ import annotations

import time
from typing import Any

from ksched.errors import KschedError
from ksched.loop.client import Kube
from ksched.objects import Obj

ROUTING_WAIT_S = 60.0


def webhook_configuration(name: str, hook: str, port: int, route_label: str, timeout_s: int) -> Obj:
    """``name``'s one webhook ``hook``: pod CREATEs in namespaces labelled ``route_label=true``
    to ``https://127.0.0.1:PORT/mutate``, failing closed (a webhook error refuses the pod, so a
    harness sees it) within ``timeout_s``."""
    client: dict[str, Any] = {"url": f"https://127.0.0.1:{port}/mutate"}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": hook,
                "clientConfig": client,
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {route_label: "true"}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": timeout_s,
            }
        ],
    }


def wait_routing(kube: Kube, namespace: str) -> None:
    """Until the API server calls the webhook with its CA and the webhook gives a plain pod of
    ``namespace`` to ksched (a dry-run create: nothing is stored)."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {"containers": [{"name": "app", "image": "app"}]},
    }
    deadline, last = time.monotonic() + ROUTING_WAIT_S, ""
    while time.monotonic() < deadline:
        r = kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", query={"dryRun": "All"}, body=probe)
        if r.ok and r.json()["spec"].get("schedulerName") == "ksched":
            return
        last = r.data[:300].decode(errors="replace")
        time.sleep(0.5)
    raise KschedError(f"the API server does not call ksched's webhook: {last}")
