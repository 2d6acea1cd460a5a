"""Seeded random scheduling scenarios for the differential test against kube-scheduler.

A scenario is a handful of nodes (labels, taints, capacity), pods already
bound to them (labels, namespaces, affinity terms) and one pending pod whose
constraints are drawn from everything ksched mirrors: resources, host ports,
taints and tolerations, node selectors and node affinity, inter-pod affinity
and anti-affinity (required and preferred, namespaces and namespaceSelector,
matchLabelKeys/mismatchLabelKeys), topology spread (maxSkew, minDomains,
whenUnsatisfiable, inclusion policies, matchLabelKeys), node images
(ImageLocality), sidecars' host ports, volumes (PersistentVolumes, claims,
StorageClasses, CSINodes: VolumeBinding, VolumeZone, VolumeRestrictions,
NodeVolumeLimits) and nominated pods.

Images and sidecars are drawn from a second generator seeded from the same
seed, volumes and nominated pods from a third, so adding them left every
other draw of a seed as it was.

Nominated pods are pending pods kube-scheduler cannot place (a nodeSelector
no node matches) and that may not preempt (``preemptionPolicy: Never``), so
kube-scheduler keeps the ``status.nominatedNodeName`` the test patches in:
its queue adds a pod to the nominator from that field, and a pod not
eligible to preempt keeps its nomination when it fails again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

NAMESPACES = ("diff-a", "diff-b")
NAMESPACE_LABELS = {"diff-a": {"team": "red"}, "diff-b": {"team": "blue"}}
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
TOPOLOGY_KEYS = (HOSTNAME, ZONE, ZONE, "rack")
APPS = ("web", "db", "cache")
TIERS = ("fe", "be")
# PriorityClasses the differential cluster creates: name -> value.
# A pod's preemptionPolicy must be its class's (Priority admission), hence "diff-high-never".
PRIORITY_CLASSES = {
    "diff-low": 10,
    "diff-mid": 100,
    "diff-high": 1000,
    "diff-high-never": 1000,
    "diff-low-never": 10,
}
# Images nodes may report: (name without a tag, size in MiB). Sizes straddle
# ImageLocality's 23 MiB floor and its 1000 MiB per-container ceiling.
IMAGES = (("registry.example/base", 40), ("registry.example/app", 300), ("registry.example/ml", 2500))
MIB = 1024 * 1024
SIDECAR_PORT = 9090
CSI_DRIVER = "csi.diff.example"
GI = "Gi"
# A node label no node has: nominated pods select it, so they stay pending.
NEVER_LABEL = "diff/never"


@dataclass
class Scenario:
    seed: int
    nodes: list[Obj]
    existing: list[Obj]
    pending: Obj
    # Plugins the scenario exercises (for the per-plugin agreement report).
    plugins: set[str] = field(default_factory=set)
    # Services and a ReplicaSet owning the pending pod: their selectors make
    # upstream's default (system) topology spreading for a pod without constraints.
    services: list[Obj] = field(default_factory=list)
    replica_set: Obj | None = None
    # PodDisruptionBudgets (preemption reprieves the pods they cover first).
    budgets: list[Obj] = field(default_factory=list)
    # StorageClasses, CSINodes, PersistentVolumes and claims, in creation order.
    storage: list[Obj] = field(default_factory=list)
    # Local PersistentVolume -> the one node it is pinned to: kube-scheduler's
    # choice of volume for an unbound claim shows its choice of node before
    # the (absent) PV controller would complete the binding.
    volume_nodes: dict[str, str] = field(default_factory=dict)
    # Pending pods nominated to a node (``status.nominatedNodeName``, patched in).
    nominated: list[Obj] = field(default_factory=list)


def _labels(rng: random.Random) -> dict[str, str]:
    labels = {"app": rng.choice(APPS)}
    if rng.random() < 0.6:
        labels["tier"] = rng.choice(TIERS)
    if rng.random() < 0.3:
        labels["version"] = rng.choice(("v1", "v2"))
    return labels


def _selector(rng: random.Random, own: dict[str, str]) -> Obj:
    kind = rng.random()
    if kind < 0.5:
        return {
            "matchLabels": {
                "app": own.get("app", rng.choice(APPS)) if rng.random() < 0.7 else rng.choice(APPS)
            }
        }
    if kind < 0.75:
        return {
            "matchExpressions": [
                {"key": "app", "operator": "In", "values": rng.sample(APPS, rng.randint(1, 2))}
            ]
        }
    if kind < 0.9:
        return {"matchExpressions": [{"key": "tier", "operator": rng.choice(("Exists", "DoesNotExist"))}]}
    return {
        "matchLabels": {"app": rng.choice(APPS)},
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": [rng.choice(TIERS)]}],
    }


def _affinity_term(rng: random.Random, own: dict[str, str], plugins: set[str]) -> Obj:
    term: Obj = {"labelSelector": _selector(rng, own), "topologyKey": rng.choice(TOPOLOGY_KEYS)}
    r = rng.random()
    if r < 0.15:
        term["namespaces"] = rng.sample(NAMESPACES, rng.randint(1, 2))
        plugins.add("InterPodAffinity/namespaces")
    elif r < 0.3:
        term["namespaceSelector"] = rng.choice(({}, {"matchLabels": {"team": rng.choice(("red", "blue"))}}))
        plugins.add("InterPodAffinity/namespaceSelector")
    if rng.random() < 0.15:
        term["matchLabelKeys" if rng.random() < 0.5 else "mismatchLabelKeys"] = ["version"]
        plugins.add("InterPodAffinity/matchLabelKeys")
    return term


def _affinity(rng: random.Random, own: dict[str, str], plugins: set[str], required_share: float) -> Obj:
    out: Obj = {}
    for kind in ("podAffinity", "podAntiAffinity"):
        if rng.random() > 0.45:
            continue
        block: Obj = {}
        if rng.random() < required_share:
            block["requiredDuringSchedulingIgnoredDuringExecution"] = [
                _affinity_term(rng, own, plugins) for _ in range(rng.randint(1, 2))
            ]
            plugins.add(f"InterPodAffinity/required-{kind}")
        if rng.random() < 0.6:
            block["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": rng.randint(1, 100), "podAffinityTerm": _affinity_term(rng, own, plugins)}
                for _ in range(rng.randint(1, 2))
            ]
            plugins.add(f"InterPodAffinity/preferred-{kind}")
        if block:
            out[kind] = block
    return out


def _spread(rng: random.Random, own: dict[str, str], plugins: set[str]) -> list[Obj]:
    out = []
    for _ in range(rng.randint(1, 2)):
        hard = rng.random() < 0.6
        c: Obj = {
            "maxSkew": rng.randint(1, 2),
            "topologyKey": rng.choice(TOPOLOGY_KEYS),
            "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
            "labelSelector": _selector(rng, own),
        }
        if hard and rng.random() < 0.25:
            c["minDomains"] = rng.randint(2, 4)
            plugins.add("PodTopologySpread/minDomains")
        if rng.random() < 0.2:
            c["nodeAffinityPolicy"] = rng.choice(("Honor", "Ignore"))
            plugins.add("PodTopologySpread/nodeAffinityPolicy")
        if rng.random() < 0.2:
            c["nodeTaintsPolicy"] = rng.choice(("Honor", "Ignore"))
            plugins.add("PodTopologySpread/nodeTaintsPolicy")
        if rng.random() < 0.15:
            c["matchLabelKeys"] = ["version"]
            plugins.add("PodTopologySpread/matchLabelKeys")
        plugins.add("PodTopologySpread/" + ("DoNotSchedule" if hard else "ScheduleAnyway"))
        out.append(c)
    # Two constraints may not share topologyKey and whenUnsatisfiable (API validation).
    seen, unique = set(), []
    for c in out:
        k = (c["topologyKey"], c["whenUnsatisfiable"])
        if k not in seen:
            seen.add(k)
            unique.append(c)
    return unique


def _pod(name: str, namespace: str, labels: dict[str, str], cpu: int, memory_mi: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "app",
                    "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{memory_mi}Mi"}},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def _sidecar(port: int) -> Obj:
    return {
        "name": "proxy",
        "image": "registry.example/proxy",
        "restartPolicy": "Always",
        "ports": [{"containerPort": port, "hostPort": port}],
    }


def _images_and_sidecars(
    rng: random.Random, nodes: list[Obj], existing: list[Obj], pending: Obj, plugins: set[str]
) -> None:
    """Node ``status.images`` with the pending pod's containers using some of
    them (ImageLocality), and sidecars holding a host port the pending pod
    wants (NodePorts counts restartable init containers)."""
    if rng.random() < 0.35:
        plugins.add("ImageLocality")
        for node in nodes:
            chosen = [img for img in IMAGES if rng.random() < 0.4]
            node["status"]["images"] = [
                {"names": [f"{name}:latest", f"{name}@sha256:{i:064x}"], "sizeBytes": size * MIB}
                for i, (name, size) in enumerate(chosen)
            ]
        s = pending["spec"]
        s["containers"][0]["image"] = rng.choice(IMAGES)[0]
        if rng.random() < 0.5:
            s["initContainers"] = [{"name": "init", "image": rng.choice(IMAGES)[0]}]
    if existing and rng.random() < 0.12:
        plugins.add("NodePorts/sidecar")
        for pod in rng.sample(existing, rng.randint(1, min(2, len(existing)))):
            pod["spec"]["initContainers"] = [_sidecar(SIDECAR_PORT)]
        s = pending["spec"]
        if rng.random() < 0.5:
            s["initContainers"] = [*s.get("initContainers", []), _sidecar(SIDECAR_PORT)]
        else:
            s["containers"][0]["ports"] = [
                *s["containers"][0].get("ports", []),
                {"containerPort": SIDECAR_PORT, "hostPort": SIDECAR_PORT},
            ]


def _claim(name: str, namespace: str, cls: str, size_gi: int, *, mode: str = "ReadWriteOnce") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "storageClassName": cls,
            "accessModes": [mode],
            "resources": {"requests": {"storage": f"{size_gi}{GI}"}},
        },
    }


def _volume(name: str, cls: str, size_gi: int, *, mode: str = "ReadWriteOnce", **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": f"{size_gi}{GI}"},
            "accessModes": [mode],
            "storageClassName": cls,
            "persistentVolumeReclaimPolicy": "Retain",
            **spec,
        },
    }


def _bind(pv: Obj, claim: Obj) -> None:
    """Bound both ways, as the PV controller leaves them (upstream's isPVCFullyBound)."""
    m = claim["metadata"]
    pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": m["namespace"], "name": m["name"]}
    claim["spec"]["volumeName"] = pv["metadata"]["name"]
    m["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}


def _storage_class(name: str, mode: str) -> Obj:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": mode,
    }


def _use(pod: Obj, claim: str) -> None:
    vols = pod["spec"].setdefault("volumes", [])
    vols.append({"name": f"v{len(vols)}", "persistentVolumeClaim": {"claimName": claim}})


def _volumes(rng: random.Random, prefix: str, sc: Scenario) -> None:
    """PersistentVolumes, claims, StorageClasses and CSINodes for the pending pod."""
    names = [n["metadata"]["name"] for n in sc.nodes]
    ns = sc.pending["metadata"]["namespace"]
    kind = rng.choice(
        ("local", "local", "local", "zonal", "zonal", "csi", "csi", "rwop", "unbound", "missing")
    )
    out = sc.storage
    if kind == "local":
        # WaitForFirstConsumer, no provisioner: local volumes pinned to nodes.
        sc.plugins.add("VolumeBinding/local")
        # kube-scheduler's binding of this pod outlives the scenario (it waits for a
        # PV controller); its failure must not land on a later scenario's pod.
        sc.pending["metadata"]["name"] = f"pending-{prefix}"
        cls = f"{prefix}-local"
        out.append(_storage_class(cls, "WaitForFirstConsumer"))
        for i in range(rng.randint(1, 5)):
            node = rng.choice(names)
            pv = _volume(
                f"{prefix}-pv{i}",
                cls,
                rng.choice((1, 2, 5)),
                mode=rng.choice(("ReadWriteOnce", "ReadWriteOnce", "ReadOnlyMany")),
                local={"path": f"/mnt/{prefix}-{i}"},
                nodeAffinity={
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}
                        ]
                    }
                },
            )
            if rng.random() < 0.2:  # already bound to another claim: not available
                pv["spec"]["claimRef"] = {
                    "kind": "PersistentVolumeClaim",
                    "namespace": NAMESPACES[1],
                    "name": "other",
                }
            sc.volume_nodes[pv["metadata"]["name"]] = node
            out.append(pv)
        for j in range(1 if rng.random() < 0.75 else 2):
            claim = _claim(f"{prefix}-data{j}", ns, cls, rng.choice((1, 2, 3)))
            out.append(claim)
            _use(sc.pending, claim["metadata"]["name"])
    elif kind == "zonal":
        # Immediate, bound to a zonal volume (node affinity and zone label).
        sc.plugins.update(("VolumeBinding/bound", "VolumeZone"))
        cls = f"{prefix}-zonal"
        out.append(_storage_class(cls, "Immediate"))
        zone = f"zone-{rng.randint(1, 3)}"
        pv = _volume(f"{prefix}-zpv", cls, 1, csi={"driver": CSI_DRIVER, "volumeHandle": f"{prefix}-zpv"})
        pv["metadata"]["labels"] = {ZONE: zone}
        if rng.random() < 0.6:
            pv["spec"]["nodeAffinity"] = {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}
                    ]
                }
            }
        claim = _claim(f"{prefix}-zdata", ns, cls, 1)
        _bind(pv, claim)
        out += [pv, claim]
        _use(sc.pending, claim["metadata"]["name"])
    elif kind == "csi":
        # CSINodes with allocatable counts; bound CSI volumes on existing pods.
        sc.plugins.add("NodeVolumeLimits")
        cls = f"{prefix}-csi"
        out.append(_storage_class(cls, "Immediate"))
        for name in names:
            driver: Obj = {"name": CSI_DRIVER, "nodeID": name}
            if rng.random() < 0.8:
                driver["allocatable"] = {"count": rng.randint(1, 3)}
            out.append(
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "CSINode",
                    "metadata": {"name": name},
                    "spec": {"drivers": [driver]},
                }
            )
        users = [p for p in sc.existing if rng.random() < 0.7]
        users.append(sc.pending)
        for k, pod in enumerate(users):
            m = pod["metadata"]
            pv = _volume(
                f"{prefix}-cpv{k}", cls, 1, csi={"driver": CSI_DRIVER, "volumeHandle": f"{prefix}-h{k}"}
            )
            claim = _claim(f"{prefix}-c{k}", m["namespace"], cls, 1)
            _bind(pv, claim)
            out += [pv, claim]
            _use(pod, claim["metadata"]["name"])
    elif kind == "rwop":
        # A ReadWriteOncePod claim an existing pod may already use.
        sc.plugins.add("VolumeRestrictions")
        cls = f"{prefix}-rwop"
        out.append(_storage_class(cls, "Immediate"))
        pv = _volume(
            f"{prefix}-rpv",
            cls,
            1,
            mode="ReadWriteOncePod",
            csi={"driver": CSI_DRIVER, "volumeHandle": prefix},
        )
        claim = _claim(f"{prefix}-rdata", ns, cls, 1, mode="ReadWriteOncePod")
        _bind(pv, claim)
        out += [pv, claim]
        same_ns = [p for p in sc.existing if p["metadata"]["namespace"] == ns]
        if same_ns and rng.random() < 0.7:
            _use(rng.choice(same_ns), claim["metadata"]["name"])
        _use(sc.pending, claim["metadata"]["name"])
    elif kind == "unbound":
        sc.plugins.add("VolumeBinding/unbound-immediate")
        cls = f"{prefix}-imm"
        out += [_storage_class(cls, "Immediate"), _claim(f"{prefix}-u", ns, cls, 1)]
        _use(sc.pending, f"{prefix}-u")
    else:
        sc.plugins.add("VolumeBinding/missing-claim")
        _use(sc.pending, f"{prefix}-absent")


def _nominated(rng: random.Random, sc: Scenario) -> None:
    """Pending pods nominated to nodes, of the pending pod's priority or another."""
    sc.plugins.add("Nominated")
    pending_labels = sc.pending["metadata"]["labels"]
    for k in range(rng.randint(1, 2)):
        labels = dict(pending_labels) if rng.random() < 0.5 else _labels(rng)
        ns = sc.pending["metadata"]["namespace"]
        pod = _pod(f"nom{k}-{sc.nodes[0]['metadata']['name']}", ns, labels, rng.choice((200, 800, 2000)), 128)
        s = pod["spec"]
        s["priorityClassName"] = "diff-high-never" if rng.random() < 0.75 else "diff-low-never"
        s["nodeSelector"] = {NEVER_LABEL: "true"}
        if rng.random() < 0.3:
            sc.plugins.add("Nominated/anti-affinity")
            s["affinity"] = {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": pending_labels["app"]}},
                            "topologyKey": HOSTNAME,
                        }
                    ]
                }
            }
        if rng.random() < 0.2:
            sc.plugins.add("Nominated/ports")
            s["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        pod["status"] = {"nominatedNodeName": rng.choice(sc.nodes)["metadata"]["name"]}
        sc.nominated.append(pod)


def generate(seed: int, prefix: str, *, volumes_and_nominations: bool = True) -> Scenario:
    rng = random.Random(seed)
    plugins: set[str] = set()
    nodes: list[Obj] = []
    for i in range(rng.randint(2, 7)):
        name = f"{prefix}-n{i}"
        labels = {HOSTNAME: name, "kubernetes.io/os": "linux"}
        if rng.random() < 0.9:
            labels[ZONE] = f"zone-{rng.randint(1, 3)}"
        if rng.random() < 0.6:
            labels["rack"] = f"rack-{rng.randint(1, 2)}"
        if rng.random() < 0.3:
            labels["disk"] = rng.choice(("ssd", "hdd"))
        taints = []
        if rng.random() < 0.2:
            taints.append({"key": "dedicated", "value": rng.choice(("gpu", "infra")), "effect": "NoSchedule"})
        if rng.random() < 0.15:
            taints.append({"key": "spot", "effect": "PreferNoSchedule"})
        cpu = rng.choice((1000, 2000, 4000))
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {"taints": taints} if taints else {},
                "status": {
                    "allocatable": {"cpu": f"{cpu}m", "memory": "4Gi", "pods": str(rng.choice((4, 8, 110)))},
                    "capacity": {"cpu": f"{cpu}m", "memory": "4Gi", "pods": "110"},
                },
            }
        )
    existing = []
    for j in range(rng.randint(0, 10)):
        labels = _labels(rng)
        pod = _pod(
            f"e{j}", rng.choice(NAMESPACES), labels, rng.choice((100, 200, 500)), rng.choice((64, 256))
        )
        pod["spec"]["nodeName"] = rng.choice(nodes)["metadata"]["name"]
        if rng.random() < 0.6:
            pod["spec"]["priorityClassName"] = rng.choice(("diff-low", "diff-mid"))
        if rng.random() < 0.3:
            existing_plugins: set[str] = set()
            affinity = _affinity(rng, labels, existing_plugins, required_share=0.5)
            if affinity:
                pod["spec"]["affinity"] = affinity
                plugins.add("InterPodAffinity/existing-pods-terms")
        existing.append(pod)

    labels = _labels(rng)
    pending = _pod("pending", NAMESPACES[0], labels, rng.choice((100, 500, 1500)), rng.choice((128, 1024)))
    s = pending["spec"]
    if rng.random() < 0.55:
        affinity = _affinity(rng, labels, plugins, required_share=0.6)
        if affinity:
            s["affinity"] = affinity
    if rng.random() < 0.5:
        s["topologySpreadConstraints"] = _spread(rng, labels, plugins)
    if rng.random() < 0.2:
        plugins.add("NodeAffinity")
        if rng.random() < 0.5:
            s["nodeSelector"] = {"disk": "ssd"}
        else:
            s.setdefault("affinity", {})["nodeAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "Exists"}]}]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "preference": {
                            "matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]
                        },
                    }
                ],
            }
    if rng.random() < 0.3:
        plugins.add("TaintToleration")
        s["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    if rng.random() < 0.1:
        plugins.add("NodePorts")
        s["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        for pod in existing[: rng.randint(0, 2)]:
            pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    budgets: list[Obj] = []
    if rng.random() < 0.35:
        plugins.add("DefaultPreemption")
        s["priorityClassName"] = "diff-high"
        # Big enough that room is often only made by evicting.
        s["containers"][0]["resources"]["requests"]["cpu"] = f"{rng.choice((800, 1500, 2500))}m"
        if rng.random() < 0.15:
            s["priorityClassName"] = "diff-high-never"
            plugins.add("DefaultPreemption/Never")
        if rng.random() < 0.3:
            plugins.add("DefaultPreemption/PDB")
            budgets.append(
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": "pdb", "namespace": rng.choice(NAMESPACES)},
                    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": rng.choice(APPS)}}},
                }
            )
    services: list[Obj] = []
    replica_set = None
    if "topologySpreadConstraints" not in s and rng.random() < 0.35:
        plugins.add("PodTopologySpread/system-defaults")
        if rng.random() < 0.7:
            services.append(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": "svc", "namespace": NAMESPACES[0]},
                    "spec": {"selector": {"app": labels["app"]}, "ports": [{"port": 80}]},
                }
            )
        if rng.random() < 0.6:
            selector: dict[str, Any] = {"matchLabels": {"app": labels["app"]}}
            if "tier" in labels and rng.random() < 0.5:
                selector["matchExpressions"] = [{"key": "tier", "operator": "In", "values": [labels["tier"]]}]
            replica_set = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": "rs", "namespace": NAMESPACES[0]},
                "spec": {
                    "replicas": 0,
                    "selector": selector,
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": "app", "image": "app"}]},
                    },
                },
            }
    _images_and_sidecars(random.Random(f"images-{seed}"), nodes, existing, pending, plugins)
    sc = Scenario(seed, nodes, existing, pending, plugins, services, replica_set, budgets)
    more = random.Random(f"volumes-{seed}")
    if volumes_and_nominations and more.random() < 0.22:
        _volumes(more, prefix, sc)
    if volumes_and_nominations and more.random() < 0.2:
        _nominated(more, sc)
    if not plugins:
        plugins.add("NodeResourcesFit")
    return sc
