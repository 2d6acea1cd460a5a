"""Preemption's writes: the preemptor's nominated node, and its victims' eviction.

As upstream's DefaultPreemption does, each victim gets a ``DisruptionTarget``
condition, then a delete (with its own grace period, and its uid as a
precondition), and a ``Preempted`` event once it is deleted; a victim already
gone gets no event. The engine chose the node and the victims; this module only
writes them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ksched.loop.client import MERGE_PATCH, ApiUnavailableError, Kube, pod_path
from ksched.loop.events import COMPONENT, now
from ksched.loop.telemetry import Telemetry
from ksched.objects import (
    DISRUPTION_TARGET,
    HANDED_OVER,
    PREEMPTION_BY_SCHEDULER,
    Obj,
    meta,
    pod_condition,
)

log = logging.getLogger(__name__)

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
HTTP_NOT_FOUND = 404


class Evictor:
    def __init__(
        self,
        kube: Kube,
        is_leader: Callable[[], bool],
        telemetry: Telemetry,
        event: Callable[[Obj, str, str, str, str], None],
    ) -> None:
        self.kube = kube
        self.is_leader = is_leader
        self.telemetry = telemetry
        # Posts an event about a pod: (pod, type, reason, action, note).
        self.event = event

    def nominate(
        self, pod: Obj, node: str | None, victims: list[tuple[str, str, str]], hand_over: str | None = None
    ) -> bool:
        """Nominate ``node`` for the pod (None: clear its nomination) and evict the victims
        (namespace, name, uid) there; nothing is written by a replica that is not the leader.
        ``hand_over``: the nomination only hands the pod to the node's owner (sharding), with
        this message on its ``ksched.io/HandedOver`` condition, True: it holds no room there.
        Without it, the nomination of a pod that ever was handed over writes that condition
        False (whatever this replica's copy shows: a write that failed left its copy False and
        the API server's True): the nomination holds. Returns whether the pod's nomination is
        ``node`` now."""
        if not self.is_leader():
            return False
        m = meta(pod)
        ns, name, uid = str(m.get("namespace")), str(m.get("name")), str(m.get("uid", ""))
        shown = (pod.get("status") or {}).get("nominatedNodeName")
        earlier = pod_condition(pod, HANDED_OVER)
        was_handed_over = earlier is not None and earlier.get("status") == "True"
        if shown == node and not victims and (node is None or was_handed_over == (hand_over is not None)):
            return True  # still waiting on the same node, or nothing to clear: nothing to write
        status: Obj = {"nominatedNodeName": node}
        if hand_over is not None or (earlier is not None and node is not None):
            state = "True" if hand_over is not None else "False"
            status["conditions"] = [
                {
                    "type": HANDED_OVER,
                    "status": state,
                    "reason": "HandedOver" if hand_over is not None else "Nominated",
                    "message": hand_over if hand_over is not None else f"{COMPONENT} nominated {node}",
                    "lastTransitionTime": (
                        earlier["lastTransitionTime"]
                        if earlier is not None
                        and earlier.get("status") == state
                        and earlier.get("lastTransitionTime")
                        else now()
                    ),
                }
            ]
        try:
            r = self.kube.request(
                "PATCH",
                pod_path(ns, name, "status"),
                body={"status": status},
                # A strategic merge patch: the condition merges into the pod's by its type.
                content_type=MERGE_PATCH,
                rate_limited=True,
            )
            if not r.ok:
                log.warning("nominating %s for %s/%s: HTTP %d: %s", node, ns, name, r.status, r.data[:300])
                return False
            if victims:
                log.info(
                    "preemption for %s/%s: nominated %s; evicting %s",
                    ns,
                    name,
                    node,
                    ", ".join(f"{v_ns}/{v_name}" for v_ns, v_name, _ in victims),
                )
            for v_ns, v_name, v_uid in victims:
                condition = {
                    "type": DISRUPTION_TARGET,
                    "status": "True",
                    "reason": PREEMPTION_BY_SCHEDULER,
                    "message": f"{COMPONENT}: preempting to accommodate a higher priority pod",
                    "lastTransitionTime": now(),
                }
                r = self.kube.request(
                    "PATCH",
                    pod_path(v_ns, v_name, "status"),
                    body={"status": {"conditions": [condition]}},
                    content_type=STRATEGIC_MERGE_PATCH,
                    rate_limited=True,
                )
                if r.status != HTTP_NOT_FOUND:
                    r = self.kube.request(
                        "DELETE",
                        pod_path(v_ns, v_name),
                        body={"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": v_uid}},
                        rate_limited=True,
                    )
                if r.ok:
                    victim = {"metadata": {"namespace": v_ns, "name": v_name, "uid": v_uid}}
                    self.event(
                        victim, "Normal", "Preempted", "Preempting", f"Preempted by pod {uid} on node {node}"
                    )
                    self.telemetry.preemption_victims.inc()
                elif r.status == HTTP_NOT_FOUND:
                    # Already gone (deleted by someone else, or by an earlier preemption this replica's
                    # watch had not yet shown): upstream's executor posts no Preempted event then.
                    log.info("victim %s/%s of %s/%s is already deleted", v_ns, v_name, ns, name)
                else:
                    log.warning("evicting %s/%s: HTTP %d: %s", v_ns, v_name, r.status, r.data[:300])
        except ApiUnavailableError as err:
            log.warning("preemption for %s/%s: %s", ns, name, err)
            return False
        return True
