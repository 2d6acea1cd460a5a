"""``--existing-pods``: a cluster filled with bound pods before anything is timed.

Owns the mix and where each pod goes (:func:`plan`, pure), and creating it (:func:`fill`).
The mix is what a real cluster runs: a DaemonSet's pod on every node; Deployments of
various sizes, each behind a Service; Deployments whose pods spread over zones
(``DoNotSchedule``, maxSkew 1); small Deployments with required anti-affinity on the
hostname (one pod per node, as databases run). Each pod carries the ownerReference its
controller would set, to a ReplicaSet (owned by its Deployment) or to the DaemonSet, all
created for real. No controller runs, so nothing re-creates or deletes them.

Placements keep every constraint, hold at most ``NODE_PODS`` pods on a node less the
headroom the phases need, and vary from node to node; each pod's requests are small enough
that the pod count, never cpu or memory, fills a node. Pods are created already bound
(``spec.nodeName``) by parallel workers, so filling takes the API server's create rate,
not a scheduler's.
"""

from __future__ import annotations

import random
import string
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ksched.bench.pods import CREATE_WORKERS, create_object
from ksched.bench.sidebyside.options import HOSTNAME, NODE_PODS, ZONE
from ksched.errors import KschedError
from ksched.loop.client import Kube
from ksched.objects import Obj

WEB, SPREAD, ANTI, DAEMON = "web", "spread", "anti-affinity", "daemonset"
# Of the pods that are not the DaemonSet's: a tenth spread over zones, a twentieth with
# anti-affinity, the rest plain Deployments.
SPREAD_SHARE, ANTI_SHARE = 10, 20
WEB_SIZES = (10, 30, 60, 120, 250)
SPREAD_SIZE = 300
ANTI_SIZE = 3
# Deployments per namespace: teams own a few dozen each.
GROUPS_PER_NAMESPACE = 40
SYSTEM_NAMESPACE = "existing-system"
DAEMONSET = "node-agent"
# Requests per pod: (cpu, memory). The largest, 110 times, fits the smallest KWOK node (4 cpu, 16Gi).
REQUESTS = (("10m", "32Mi"), ("20m", "64Mi"), ("30m", "128Mi"))
DAEMON_REQUESTS = ("30m", "128Mi")
# A node's pod count varies around the mean by this fraction either way; every DENSE_EVERY-th
# node is as full as the fill makes any (bin-packed nodes, which a scheduler must pass over).
SPREAD_OF_NODE_COUNTS = 0.4
DENSE_EVERY = 50
# Creates per batch handed to the workers: bounds what the fill holds in memory at once.
CREATE_CHUNK = 4000


@dataclass(frozen=True)
class Group:
    """One controller of existing pods (a Deployment, or the DaemonSet) and its pods' nodes,
    as node indices (``kwok-node-NNNNN``)."""

    kind: str
    namespace: str
    name: str
    nodes: tuple[int, ...]
    requests: tuple[str, str]


def node_name(index: int) -> str:
    return f"kwok-node-{index:05d}"


class _Ring:
    """Nodes with room left, taken in turn (one pod per node, then the next), so that a
    Deployment's pods spread over the nodes as a scheduler's would."""

    def __init__(self, remaining: list[int], members: list[int]):
        self.remaining = remaining
        self.ring = [i for i in members if remaining[i] > 0]
        self.pos = 0

    def take(self, distinct_from: tuple[int, ...] = ()) -> int:
        tried = 0
        while self.ring and tried <= len(self.ring):
            self.pos %= len(self.ring)
            i = self.ring[self.pos]
            if self.remaining[i] <= 0:
                self.ring.pop(self.pos)
                continue
            self.pos += 1
            if i in distinct_from:
                tried += 1
                continue
            self.remaining[i] -= 1
            return i
        raise KschedError("the fill ran out of nodes with room: give more --nodes or fewer --existing-pods")


def node_counts(nodes: int, pods: int, most: int, rng: random.Random) -> list[int]:
    """How many pods each node holds, summing to ``pods``: every ``DENSE_EVERY``-th node full
    (``most``) where the total allows, the others around their mean, varying by
    ``SPREAD_OF_NODE_COUNTS``, each from 1 (the DaemonSet's) to ``most``."""
    if pods < nodes:
        raise KschedError(
            f"--existing-pods {pods} is fewer than --nodes {nodes}: each node runs a DaemonSet pod"
        )
    if pods > nodes * most:
        raise KschedError(
            f"--existing-pods {pods} does not fit {nodes} nodes at {most} pods each (the {NODE_PODS} a node "
            f"holds less the room the phases need): give more --nodes or fewer pods"
        )
    dense = set(range(0, nodes, DENSE_EVERY))
    if len(dense) == nodes or pods - len(dense) * most < nodes - len(dense):
        dense = set()
    mean = (pods - len(dense) * most) / (nodes - len(dense))
    counts = [
        most
        if i in dense
        else min(most, max(1, round(mean * (1 + rng.uniform(-SPREAD_OF_NODE_COUNTS, SPREAD_OF_NODE_COUNTS)))))
        for i in range(nodes)
    ]
    excess, i = sum(counts) - pods, 0
    while excess:
        step = 1 if excess < 0 else -1
        if i not in dense and 1 <= counts[i] + step <= most:
            counts[i] += step
            excess += step
        i = (i + 1) % nodes
    return counts


def plan(nodes: int, zones: int, pods: int, headroom: int, seed: int) -> list[Group]:
    """The existing pods as groups, each pod on a node: ``pods`` in all, at most
    ``NODE_PODS - headroom`` on a node, every constraint kept."""
    rng = random.Random(seed)
    remaining = node_counts(nodes, pods, NODE_PODS - headroom, rng)
    everyone = list(range(nodes))
    groups = [Group(DAEMON, SYSTEM_NAMESPACE, DAEMONSET, tuple(everyone), DAEMON_REQUESTS)]
    remaining = [r - 1 for r in remaining]
    rest = pods - nodes
    spread, anti = rest // SPREAD_SHARE, rest // ANTI_SHARE
    web = rest - spread - anti
    counter = 0

    def next_name(prefix: str) -> tuple[str, str]:
        nonlocal counter
        counter += 1
        return f"existing-{(counter - 1) // GROUPS_PER_NAMESPACE:03d}", f"{prefix}-{counter - 1:05d}"

    # Spread first, while every zone has room: pod k of a Deployment goes to zone k mod zones.
    by_zone = [_Ring(remaining, [i for i in everyone if i % zones == z]) for z in range(zones)]
    while spread:
        size = min(SPREAD_SIZE, spread)
        placed = tuple(by_zone[k % zones].take() for k in range(size))
        groups.append(Group(SPREAD, *next_name("spread"), placed, rng.choice(REQUESTS)))
        spread -= size
    ring = _Ring(remaining, everyone)
    while anti:
        size = min(ANTI_SIZE, anti, nodes)
        taken: tuple[int, ...] = ()
        for _ in range(size):
            taken += (ring.take(distinct_from=taken),)
        groups.append(Group(ANTI, *next_name("db"), taken, rng.choice(REQUESTS)))
        anti -= size
    while web:
        size = min(rng.choice(WEB_SIZES), web)
        groups.append(
            Group(WEB, *next_name("web"), tuple(ring.take() for _ in range(size)), rng.choice(REQUESTS))
        )
        web -= size
    return groups


# ---------------------------------------------------------------------------
# The objects


def template_hash(name: str, revision: int) -> str:
    """A stable pod-template-hash for a Deployment's revision (letters and digits, as upstream's)."""
    rng = random.Random(f"{name}/{revision}")
    return "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(10))


def replica_set_name(group: Group, revision: int) -> str:
    return f"{group.name}-{template_hash(group.name, revision)}"


def _labels(group: Group, revision: int) -> dict[str, str]:
    if group.kind == DAEMON:
        return {"app": group.name}
    return {"app": group.name, "tier": group.kind, "pod-template-hash": template_hash(group.name, revision)}


def pod_spec(group: Group, requests: tuple[str, str]) -> Obj:
    """The pod template's spec: its constraints by kind, and small requests."""
    cpu, memory = requests
    spec: Obj = {
        "containers": [
            {"name": "app", "image": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
        ]
    }
    if group.kind == SPREAD:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": group.name}},
            }
        ]
    elif group.kind == ANTI:
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": group.name}}, "topologyKey": HOSTNAME}
                ]
            }
        }
    elif group.kind == DAEMON:
        spec["tolerations"] = [{"operator": "Exists"}]
    return spec


def owners(group: Group) -> list[tuple[str, Obj]]:
    """The group's controller objects, each with the path it is posted to, in creation order:
    the DaemonSet, or a Deployment (then its first ReplicaSet, made by :func:`replica_set`)
    and, for plain Deployments, a Service."""
    ns, name = group.namespace, group.name
    selector = {"app": name}
    template = {"metadata": {"labels": _labels(group, 0)}, "spec": pod_spec(group, group.requests)}
    if group.kind == DAEMON:
        body = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": selector}, "template": template},
        }
        return [(f"/apis/apps/v1/namespaces/{ns}/daemonsets", body)]
    out = [
        (
            f"/apis/apps/v1/namespaces/{ns}/deployments",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "replicas": len(group.nodes),
                    "selector": {"matchLabels": selector},
                    "template": template,
                },
            },
        )
    ]
    if group.kind == WEB:
        out.append(
            (
                f"/api/v1/namespaces/{ns}/services",
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"selector": selector, "ports": [{"port": 80, "targetPort": 8080}]},
                },
            )
        )
    return out


def replica_set(group: Group, revision: int, replicas: int, deployment: Obj) -> tuple[str, Obj]:
    """A Deployment's ReplicaSet for ``revision``, owned by the Deployment as its controller would."""
    ns = group.namespace
    labels = _labels(group, revision)
    body = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": replica_set_name(group, revision),
            "namespace": ns,
            "labels": labels,
            "ownerReferences": [_owner_ref(deployment)],
        },
        "spec": {
            "replicas": replicas,
            "selector": {
                "matchLabels": {"app": group.name, "pod-template-hash": labels["pod-template-hash"]}
            },
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(group, group.requests)},
        },
    }
    return f"/apis/apps/v1/namespaces/{ns}/replicasets", body


def _owner_ref(owner: Obj) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod(
    group: Group, revision: int, index: int, owner: Obj, scheduler_name: str | None, node: str | None
) -> Obj:
    """Pod ``index`` of the group's ``revision``: bound to ``node`` when given, else pending for
    ``scheduler_name``. Named as its controller names it (owner name, a suffix)."""
    meta: Obj = {
        "name": f"{owner['metadata']['name']}-{index:05x}",
        "namespace": group.namespace,
        "labels": _labels(group, revision),
        "ownerReferences": [_owner_ref(owner)],
    }
    spec = pod_spec(group, group.requests)
    if group.kind == DAEMON and node is not None:
        # As the DaemonSet controller pins its pods: required affinity to the node's name.
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    if node is not None:
        spec["nodeName"] = node
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


# ---------------------------------------------------------------------------
# Creating them


def post_all(kube: Kube, items: list[tuple[str, Obj]]) -> list[Obj]:
    """POST each (path, body) in parallel; returns the created objects in order. An object that
    exists already (409) is read back, so a group's owners can be looked up again."""

    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        return list(pool.map(lambda item: create_object(kube, item[0], item[1], existing_ok=True), items))


@dataclass
class Filled:
    """What the fill created: every pod's UID by ``namespace/name``, the plain Deployments'
    pods oldest first (what a rolling update replaces), each group's controller, and the rate."""

    uids: dict[str, str]
    replaceable: list[tuple[Group, str]]
    controllers: dict[tuple[str, str], Obj]
    seconds: float = 0.0
    pods_per_s: float = 0.0


def fill(kube: Kube, groups: list[Group]) -> Filled:
    """Create the groups' namespaces and controllers, then their pods bound to their nodes
    (parallel workers, ``CREATE_CHUNK`` at a time); the rate is the pods' alone."""
    namespaces = sorted({g.namespace for g in groups})
    post_all(
        kube,
        [
            ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}})
            for n in namespaces
        ],
    )
    firsts = [owners(g) for g in groups]
    created = post_all(kube, [item for items in firsts for item in items])
    controllers: dict[tuple[str, str], Obj] = {}
    it = iter(created)
    for g, items in zip(groups, firsts, strict=True):
        objs = [next(it) for _ in items]
        controllers[(g.namespace, g.name)] = objs[0]
    deployments = [g for g in groups if g.kind != DAEMON]
    sets = post_all(
        kube, [replica_set(g, 0, len(g.nodes), controllers[(g.namespace, g.name)]) for g in deployments]
    )
    pod_owner = {
        (g.namespace, g.name): controllers[(g.namespace, g.name)] for g in groups if g.kind == DAEMON
    }
    pod_owner |= {(g.namespace, g.name): rs for g, rs in zip(deployments, sets, strict=True)}

    def bodies() -> Iterator[tuple[Group, Obj]]:
        for g in groups:
            owner = pod_owner[(g.namespace, g.name)]
            for index, n in enumerate(g.nodes):
                yield g, pod(g, 0, index, owner, None, node_name(n))

    out = Filled({}, [], controllers)

    def post(item: tuple[Group, Obj]) -> tuple[Group, str, str]:
        g, body = item
        r = kube.request("POST", f"/api/v1/namespaces/{g.namespace}/pods", body=body)
        if not r.ok:
            raise KschedError(f"creating {body['metadata']['name']}: HTTP {r.status}: {r.data[:200]!r}")
        return g, f"{g.namespace}/{body['metadata']['name']}", r.json()["metadata"]["uid"]

    start = time.monotonic()
    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        chunk: list[tuple[Group, Obj]] = []
        for item in bodies():
            chunk.append(item)
            if len(chunk) == CREATE_CHUNK:
                _record(out, pool.map(post, chunk))
                chunk = []
        _record(out, pool.map(post, chunk))
    out.seconds = time.monotonic() - start
    out.pods_per_s = len(out.uids) / out.seconds if out.seconds > 0 else 0.0
    return out


def _record(out: Filled, results: Iterator[tuple[Group, str, str]]) -> None:
    for g, key, uid in results:
        out.uids[key] = uid
        if g.kind == WEB:
            out.replaceable.append((g, key))
