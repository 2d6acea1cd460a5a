"""Volume binding: a pod's unbound claims bound before the pod, as upstream's volume
binder does (``BindPodVolumes``).

Each chosen PersistentVolume gets the claim as its ``claimRef``, each claim to
provision gets ``volume.kubernetes.io/selected-node``; then :meth:`VolumeBinder.bind`
waits (bounded) until the PV controller has bound every claim. If that fails,
what was written is undone where the claim is still unbound and still names what
ksched wrote, and the error says why. It never binds the pod itself (see
:mod:`ksched.loop.scheduling.binder`).
"""

from __future__ import annotations

import logging
import time

from ksched.engine.storage import BIND_COMPLETED, BOUND_BY_CONTROLLER, SELECTED_NODE, ClaimBinding
from ksched.loop.client import MERGE_PATCH, ApiUnavailableError, Kube
from ksched.objects import Obj, meta, spec

log = logging.getLogger(__name__)

# How often a volume binding in progress is checked (upstream's binder polls every second).
VOLUME_POLL_S = 0.5


class VolumeBindingError(Exception):
    """Binding a pod's volumes failed; the message says why."""


class VolumeBinder:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def bind(self, node: str, volumes: tuple[ClaimBinding, ...], timeout_s: float) -> None:
        """Bind the claims for a pod going to ``node`` and wait up to ``timeout_s`` until the PV
        controller has bound them all. On failure (:class:`VolumeBindingError`,
        :class:`~ksched.loop.client.ApiUnavailableError`, or a bug) what was written is undone
        and the error raised."""
        # A binding counts as written once it is sent: a write whose answer was lost may
        # have landed, and the undo checks what is there before taking anything back.
        written: list[ClaimBinding] = []
        try:
            for b in volumes:
                written.append(b)
                self._write_binding(b, node)
            self._wait_bound(volumes, node, time.monotonic() + timeout_s)
        except Exception:
            self.undo(written, node)  # a volume must not stay claimed for a pod not placed
            raise

    def _write_binding(self, b: ClaimBinding, node: str) -> None:
        ns, claim_name = b.claim.split("/", 1)
        claim_path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim_name}"
        if b.volume is None:
            body = {"metadata": {"annotations": {SELECTED_NODE: node}}}
            r = self.kube.request("PATCH", claim_path, body=body, content_type=MERGE_PATCH, rate_limited=True)
            if not r.ok:
                raise VolumeBindingError(f'selecting node {node} for claim "{claim_name}": HTTP {r.status}')
            return
        claim = self._get(claim_path, f'persistentvolumeclaim "{claim_name}"')
        pv_path = f"/api/v1/persistentvolumes/{b.volume}"
        pv = self._get(pv_path, f'persistentvolume "{b.volume}"')
        ref = spec(pv).get("claimRef")
        if ref and (ref.get("namespace"), ref.get("name")) != (ns, claim_name):
            raise VolumeBindingError(f'persistentvolume "{b.volume}" was bound to another claim')
        cm = meta(claim)
        pv.setdefault("spec", {})["claimRef"] = {
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "namespace": ns,
            "name": claim_name,
            "uid": cm.get("uid"),
            "resourceVersion": cm.get("resourceVersion"),
        }
        pv.setdefault("metadata", {}).setdefault("annotations", {})[BOUND_BY_CONTROLLER] = "yes"
        # An update (not a patch) carries the read resourceVersion: a volume taken since is a 409.
        r = self.kube.request("PUT", pv_path, body=pv, rate_limited=True)
        if not r.ok:
            raise VolumeBindingError(
                f'binding persistentvolume "{b.volume}" to claim "{claim_name}": HTTP {r.status}'
            )

    def _get(self, path: str, what: str) -> Obj:
        r = self.kube.request("GET", path, rate_limited=True)
        if not r.ok:
            raise VolumeBindingError(f"{what}: HTTP {r.status}")
        obj: Obj = r.json()
        return obj

    def _wait_bound(self, volumes: tuple[ClaimBinding, ...], node: str, deadline: float) -> None:
        """Until the PV controller has bound every claim (upstream ``checkBindings``); a
        volume whose claimRef was reset or taken, or a claim whose selected node was
        removed or changed, fails at once."""
        waiting = list(volumes)
        while True:
            still = []
            for b in waiting:
                ns, claim_name = b.claim.split("/", 1)
                claim = self._get(
                    f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim_name}",
                    f'persistentvolumeclaim "{claim_name}"',
                )
                annotations = meta(claim).get("annotations") or {}
                if spec(claim).get("volumeName") and BIND_COMPLETED in annotations:
                    continue
                if b.volume is None and annotations.get(SELECTED_NODE) != node:
                    raise VolumeBindingError(
                        f'provisioning claim "{claim_name}" failed: its selected node was removed'
                    )
                if b.volume is not None:
                    pv = self._get(f"/api/v1/persistentvolumes/{b.volume}", f'persistentvolume "{b.volume}"')
                    ref = spec(pv).get("claimRef")
                    if not isinstance(ref, dict) or (ref.get("namespace"), ref.get("name")) != (
                        ns,
                        claim_name,
                    ):
                        raise VolumeBindingError(f'claimRef of persistentvolume "{b.volume}" was reset')
                still.append(b)
            if not still:
                return
            if time.monotonic() >= deadline:
                names = ", ".join(f'"{b.claim.split("/", 1)[1]}"' for b in still)
                raise VolumeBindingError(f"timed out waiting for claims {names} to be bound")
            waiting = still
            time.sleep(VOLUME_POLL_S)

    def undo(self, written: list[ClaimBinding], node: str) -> None:
        """Take back what ``_write_binding`` wrote, where the claim is still unbound
        and still names what ksched wrote (another node's selection is not ours)."""
        for b in written:
            ns, claim_name = b.claim.split("/", 1)
            claim_path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim_name}"
            try:
                r = self.kube.request("GET", claim_path, rate_limited=True)
                claim: Obj = r.json() if r.ok else {}  # a claim gone still frees its volume
                if spec(claim).get("volumeName"):
                    continue  # bound after all: leave it
                if b.volume is None:
                    if (meta(claim).get("annotations") or {}).get(SELECTED_NODE) != node:
                        continue
                    body: Obj = {"metadata": {"annotations": {SELECTED_NODE: None}}}
                    self.kube.request(
                        "PATCH", claim_path, body=body, content_type=MERGE_PATCH, rate_limited=True
                    )
                else:
                    self._release_volume(b.volume, ns, claim_name)
            except ApiUnavailableError as err:
                log.warning("undoing the binding of claim %s: %s", b.claim, err)

    def _release_volume(self, volume: str, ns: str, claim_name: str) -> None:
        """Clear the volume's ``claimRef`` if it still names the claim. An update carrying
        the read resourceVersion: a volume the PV controller or another binder touched since
        is a 409 and stays as it is."""
        pv_path = f"/api/v1/persistentvolumes/{volume}"
        r = self.kube.request("GET", pv_path, rate_limited=True)
        if not r.ok:
            return
        pv: Obj = r.json()
        ref = spec(pv).get("claimRef")
        if not isinstance(ref, dict) or (ref.get("namespace"), ref.get("name")) != (ns, claim_name):
            return  # never written, or bound to another claim since: not ours to clear
        del pv["spec"]["claimRef"]
        (meta(pv).get("annotations") or {}).pop(BOUND_BY_CONTROLLER, None)
        r = self.kube.request("PUT", pv_path, body=pv, rate_limited=True)
        if not r.ok:
            log.warning("releasing persistentvolume %s: HTTP %d", volume, r.status)
