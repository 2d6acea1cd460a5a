"""Hand-off: pods ksched has failed to place for too long go to default-scheduler.

``spec.schedulerName`` cannot change, so a pod is handed off by replacing
it. A bare pod is deleted (precondition: its uid, so a newer pod of the same
name is never touched) and re-created from its full object with
``schedulerName: default-scheduler``, the same name, labels, annotations and
spec, plus ``ksched.io/handed-off: "true"``; a dry-run create comes first, so a pod
ksched may not create again (a role bound in some namespaces only) is never deleted. A controller-owned pod is
evicted through the Eviction API (PodDisruptionBudgets apply; a refused
eviction is retried later), and its owner is remembered so the webhook
leaves the replacement to default-scheduler. A pod annotated
``ksched.io/handoff: "false"`` is never handed off.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ksched.config import HandoffConfig
from ksched.loop.client import ApiUnavailableError, Kube, pod_path
from ksched.loop.telemetry import Telemetry
from ksched.objects import DEFAULT_SCHEDULER, Obj, controller_of, meta

log = logging.getLogger(__name__)

OPT_OUT = "ksched.io/handoff"
HANDED_OFF = "ksched.io/handed-off"
# Server-set or per-instance fields a re-created pod must not carry.
_DROP_META = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "generation",
    "managedFields",
)
RECREATE_TRIES = 20
HTTP_CONFLICT = 409
RECREATE_WAIT_S = 0.25


def opted_out(pod: Obj) -> bool:
    return str((meta(pod).get("annotations") or {}).get(OPT_OUT, "")).lower() == "false"


def replacement(pod: Obj) -> Obj:
    """The pod to create for default-scheduler: same identity and spec, nothing server-set."""
    m = {k: v for k, v in meta(pod).items() if k not in _DROP_META}
    m["annotations"] = {**(m.get("annotations") or {}), HANDED_OFF: "true"}
    spec = {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}
    spec["schedulerName"] = DEFAULT_SCHEDULER
    return {"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": spec}


class Handoff:
    def __init__(self, kube: Kube, config: HandoffConfig, telemetry: Telemetry) -> None:
        self.kube = kube
        self.config = config
        self.telemetry = telemetry
        # Owner uid -> until when (monotonic) its new pods are left to default-scheduler.
        self.owners: dict[str, float] = {}
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="handoff")

    def skip_owner(self, pod: Obj) -> bool:
        """Whether the webhook should leave this pod alone: its owner's pod was handed off."""
        now = time.monotonic()
        return any(
            self.owners.get(ref.get("uid", ""), 0) > now for ref in meta(pod).get("ownerReferences") or []
        )

    def submit(self, pod: Obj, reason: str, done: Any) -> None:
        """Hand the pod off in the background; ``done(bool)`` says whether it left ksched."""
        self._pool.submit(self._run, pod, reason, done)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)

    def _run(self, pod: Obj, reason: str, done: Any) -> None:
        try:
            ok = self._hand_off(pod, reason)
        except ApiUnavailableError as err:
            log.warning("hand-off of %s/%s: %s", meta(pod).get("namespace"), meta(pod).get("name"), err)
            ok = False
        except Exception:
            log.exception("hand-off of %s/%s", meta(pod).get("namespace"), meta(pod).get("name"))
            ok = False
        done(ok)

    def _hand_off(self, pod: Obj, reason: str) -> bool:
        ns, name = str(meta(pod).get("namespace")), str(meta(pod).get("name"))
        r = self.kube.request("GET", pod_path(ns, name))
        if r.status == 404:
            return True  # gone already
        if not r.ok:
            return False
        full = r.json()
        if full["spec"].get("nodeName") or full["metadata"]["uid"] != meta(pod).get("uid"):
            return True  # bound, or a different pod now: nothing to hand off
        owner = controller_of(full)
        if owner is not None:
            return self._evict(full, owner, reason)
        return self._recreate(full, reason)

    def _evict(self, pod: Obj, owner: Obj, reason: str) -> bool:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
        # The owner is remembered before the eviction is sent: its controller may create the
        # replacement (and the API server call the webhook for it) before the answer returns.
        uid = str(owner.get("uid", ""))
        before = self.owners.get(uid)
        self.owners[uid] = time.monotonic() + self.config.after_s
        r = self.kube.request("POST", pod_path(ns, name, "eviction"), body=body, rate_limited=True)
        if not r.ok and r.status != 404:
            if before is None:
                self.owners.pop(uid, None)
            else:
                self.owners[uid] = before
            if r.status == 429:
                log.info(
                    "hand-off of %s/%s: eviction refused by a PodDisruptionBudget; retrying later", ns, name
                )
            else:
                log.warning("hand-off of %s/%s: eviction: HTTP %d: %s", ns, name, r.status, r.data[:200])
            return False
        self.telemetry.fallbacks.labels(reason="handed_off").inc()
        log.info("handed %s/%s off to %s (evicted; %s)", ns, name, DEFAULT_SCHEDULER, reason)
        return True

    def _recreate(self, pod: Obj, reason: str) -> bool:
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
        delete = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        new = replacement(pod)
        # Ask first whether the re-create would be allowed (a dry run: authorization and
        # admission, nothing stored; the pod's own name answers 409 while it exists): a role
        # bound in some namespaces only must never delete a pod it cannot create again.
        r = self.kube.request(
            "POST", f"/api/v1/namespaces/{ns}/pods", query={"dryRun": "All"}, body=new, rate_limited=True
        )
        if not r.ok and r.status != HTTP_CONFLICT:
            log.warning(
                "hand-off of %s/%s: not deleted, as its re-create would fail: HTTP %d: %s",
                ns,
                name,
                r.status,
                r.data[:200],
            )
            return False
        r = self.kube.request("DELETE", pod_path(ns, name), body=delete, rate_limited=True)
        if not r.ok and r.status != 404:
            log.warning("hand-off of %s/%s: delete: HTTP %d: %s", ns, name, r.status, r.data[:200])
            return False
        for _ in range(RECREATE_TRIES):
            r = self.kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body=new, rate_limited=True)
            if r.status != HTTP_CONFLICT:  # the old pod is still being removed
                break
            time.sleep(RECREATE_WAIT_S)
        if not r.ok:
            # The pod is deleted but not re-created: say so loudly, with the object to restore.
            log.error(
                "hand-off of %s/%s: re-create failed: HTTP %d: %s; pod was: %s",
                ns,
                name,
                r.status,
                r.data[:200],
                new,
            )
            return True
        self.telemetry.fallbacks.labels(reason="handed_off").inc()
        log.info("handed %s/%s off to %s (re-created; %s)", ns, name, DEFAULT_SCHEDULER, reason)
        return True
