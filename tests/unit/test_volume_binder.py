"""The binder's volume binding against a fake API server: what a failed bind
leaves behind on PersistentVolumes and claims."""

from __future__ import annotations

import copy
import threading
from typing import Any

import orjson

from ksched.config import Config
from ksched.engine.storage import BOUND_BY_CONTROLLER, SELECTED_NODE, ClaimBinding
from ksched.loop.client import ApiUnavailableError, RateLimiter, Response
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.mirror.state import ClusterState
from ksched.loop.scheduling.binder import Binder, Outcome
from ksched.loop.scheduling.cycle import Scheduler
from ksched.loop.scheduling.queue import SchedulingQueue
from ksched.loop.scheduling.volume_binder import VolumeBinder
from ksched.loop.telemetry import Telemetry
from tests.unit.test_volumes import LOCAL, NODES, claim, local_pv, with_claims
from tests.unit.wire_bodies import body as wire_body

Obj = dict[str, Any]
CLAIM_PATH = "/api/v1/namespaces/default/persistentvolumeclaims/data"
PV_PATH = "/api/v1/persistentvolumes/pv0"


def merge(target: Obj, patch: Obj) -> Obj:
    """RFC 7386 merge patch."""
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            out[k] = merge(out.get(k) or {}, v)
        else:
            out[k] = v
    return out


class FakeApi:
    """Objects by path; PUT checks resourceVersion, PATCH merges; ``lose_answer`` drops
    the answer of that method+path once, after applying the write."""

    def __init__(self, objects: dict[str, Obj], lose_answer: str = "") -> None:
        self.objects = objects
        self.lose_answer = lose_answer
        self.version = 1
        self.posted: list[Obj] = []
        self.writes = RateLimiter(1e9, 1_000_000)

    def connection(self) -> FakeApi:
        return self

    def request(
        self, method: str, path: str, *, body: Any = None, raw: bytes | None = None, **_: Any
    ) -> Response:
        if raw is not None:
            body = wire_body(raw)
        if method == "GET":
            obj = self.objects.get(path)
            return Response(200, orjson.dumps(obj)) if obj is not None else Response(404, b"")
        if method == "PUT":
            if body["metadata"].get("resourceVersion") != self.objects[path]["metadata"]["resourceVersion"]:
                return Response(409, b"")
            self.version += 1
            self.objects[path] = {
                **body,
                "metadata": {**body["metadata"], "resourceVersion": str(self.version)},
            }
        elif method == "PATCH":
            self.version += 1
            self.objects[path] = merge(self.objects[path], body)
            self.objects[path]["metadata"]["resourceVersion"] = str(self.version)
        elif method == "POST":
            self.posted.append(body)
            return Response(201, b"{}")
        if f"{method} {path}" == self.lose_answer:
            self.lose_answer = ""
            raise ApiUnavailableError(f"{method} {path}: connection reset")
        return Response(200, b"{}")


def cluster() -> dict[str, Obj]:
    claim = {
        "metadata": {"name": "data", "namespace": "default", "uid": "c1", "resourceVersion": "1"},
        "spec": {},
    }
    pv = {"metadata": {"name": "pv0", "resourceVersion": "1"}, "spec": {"capacity": {"storage": "1Gi"}}}
    return {CLAIM_PATH: claim, PV_PATH: pv}


def bind_volume(api: FakeApi, timeout_s: float = 0.0) -> Outcome | None:
    binder = Binder(api, 1, "ksched", Telemetry(), lambda: True)  # type: ignore[arg-type]
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"}}
    try:
        return binder._bind_volumes(pod, "n0", (ClaimBinding("default/data", "pv0"),), timeout_s)
    finally:
        binder.shutdown()


def test_a_timed_out_binding_releases_the_volume() -> None:
    api = FakeApi(cluster())
    assert bind_volume(api) is Outcome.ERROR
    pv = api.objects[PV_PATH]
    assert "claimRef" not in pv["spec"]
    assert BOUND_BY_CONTROLLER not in (pv["metadata"].get("annotations") or {})


def test_a_binding_whose_answer_was_lost_is_released_too() -> None:
    api = FakeApi(cluster(), lose_answer=f"PUT {PV_PATH}")
    assert bind_volume(api) is Outcome.ERROR
    assert "claimRef" not in api.objects[PV_PATH]["spec"]


def test_undo_leaves_a_volume_bound_to_another_claim_since() -> None:
    api = FakeApi(cluster())
    other = {"kind": "PersistentVolumeClaim", "namespace": "default", "name": "other", "uid": "c2"}
    api.objects[PV_PATH]["spec"]["claimRef"] = copy.deepcopy(other)
    VolumeBinder(api).undo([ClaimBinding("default/data", "pv0")], "n0")  # type: ignore[arg-type]
    assert api.objects[PV_PATH]["spec"]["claimRef"] == other


class SlowProvisioner(FakeApi):
    """The claim's GETs block until ``release`` is set: a provisioner that takes its time."""

    def __init__(self, objects: dict[str, Obj]) -> None:
        super().__init__(objects)
        self.release = threading.Event()

    def request(self, method: str, path: str, *, body: Any = None, **kw: Any) -> Response:
        if method == "GET" and path == CLAIM_PATH:
            self.release.wait(10.0)
        return super().request(method, path, body=body, **kw)


def test_a_pod_without_volumes_does_not_wait_behind_a_volume_binding() -> None:
    api = SlowProvisioner(cluster())
    binder = Binder(api, 1, "ksched", Telemetry(), lambda: True)  # type: ignore[arg-type]
    plain_bound = threading.Event()
    outcomes: list[Outcome] = []
    try:
        waiting = {"metadata": {"name": "claims", "namespace": "default", "uid": "u1"}}
        binder.bind(
            waiting,
            "n0",
            outcomes.append,
            volumes=(ClaimBinding("default/data", None),),
            volume_timeout_s=0.0,
        )
        plain = {"metadata": {"name": "plain", "namespace": "default", "uid": "u2"}}
        binder.bind(plain, "n0", lambda outcome: plain_bound.set())
        assert plain_bound.wait(5.0), "the plain pod's bind waited behind the volume binding"
    finally:
        api.release.set()
        binder.shutdown()
    assert outcomes == [Outcome.ERROR]


class RecordingBinder:
    def __init__(self) -> None:
        self.bound: list[tuple[str, str, tuple[ClaimBinding, ...]]] = []

    def bind(self, pod: Obj, node: str, done: Any, note: str, volumes: Any, timeout_s: float) -> None:
        self.bound.append((pod["metadata"]["name"], node, volumes))


def test_two_pods_of_a_batch_naming_one_unbound_claim_bind_it_once() -> None:
    # Upstream's assume cache: the second pod sees the claim bound to the first's
    # volume and follows it to its node, never a second volume for the same claim.
    state = ClusterState()
    for n in NODES:
        state.on_node("ADDED", n, None)
    for o in (LOCAL, local_pv("pv-a", "a"), local_pv("pv-b", "b"), claim("data")):
        kind = (
            "StorageClass"
            if "provisioner" in o
            else "PersistentVolume"
            if "capacity" in o["spec"]
            else "PersistentVolumeClaim"
        )
        state.storage_handler(kind)("ADDED", o, None)
    queue = SchedulingQueue(lambda: 1000.0)
    binder = RecordingBinder()
    s = Scheduler(
        Config(), state, queue, binder, Telemetry(), lambda: True, MetricStore((), None, Telemetry())
    )  # type: ignore[arg-type]
    for name, uid in (("p", "u1"), ("q", "u2")):
        p = with_claims(name, "data")
        p["metadata"]["uid"] = uid
        queue.add(p)
    s.cycle(queue.pop_batch(10, 0.0, 0.0))
    s.cycle(queue.pop_batch(10, 0.0, 0.0))
    (first, node, volumes), (second, second_node, second_volumes) = binder.bound
    assert (first, second) == ("p", "q")
    assert second_node == node
    assert second_volumes == volumes


class ResetsClaimRef(FakeApi):
    """The PV controller takes the volume back (its claim was recreated) right after the bind."""

    def request(self, method: str, path: str, *, body: Any = None, **kw: Any) -> Response:
        r = super().request(method, path, body=body, **kw)
        if method == "PUT" and path == PV_PATH and "claimRef" in body["spec"]:
            del self.objects[PV_PATH]["spec"]["claimRef"]
        return r


def test_a_volume_whose_claim_ref_is_reset_fails_the_bind_at_once() -> None:
    api = ResetsClaimRef(cluster())
    assert bind_volume(api, timeout_s=30.0) is Outcome.ERROR
    notes = [e.get("note", "") for e in api.posted]
    assert any('claimRef of persistentvolume "pv0" was reset' in n for n in notes), notes


class RefusesPatch(FakeApi):
    def request(self, method: str, path: str, *, body: Any = None, **kw: Any) -> Response:
        if method == "PATCH" and body["metadata"]["annotations"].get(SELECTED_NODE):
            return Response(500, b"")
        return super().request(method, path, body=body, **kw)


def test_a_selection_that_failed_leaves_another_nodes_selection_alone() -> None:
    objects = cluster()
    objects[CLAIM_PATH]["metadata"]["annotations"] = {SELECTED_NODE: "n1"}
    api = RefusesPatch(objects)
    binder = Binder(api, 1, "ksched", Telemetry(), lambda: True)  # type: ignore[arg-type]
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"}}
    try:
        outcome = binder._bind_volumes(pod, "n0", (ClaimBinding("default/data", None),), 0.0)
    finally:
        binder.shutdown()
    assert outcome is Outcome.ERROR
    assert api.objects[CLAIM_PATH]["metadata"]["annotations"] == {SELECTED_NODE: "n1"}
