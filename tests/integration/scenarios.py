"""Seeded random scheduling scenarios for the differential test against kube-scheduler.

A scenario is a handful of nodes (labels, taints, capacity), pods already
bound to them (labels, namespaces, affinity terms) and one pending pod whose
constraints are drawn from everything ksched mirrors: resources, host ports,
taints and tolerations, node selectors and node affinity, inter-pod affinity
and anti-affinity (required and preferred, namespaces and namespaceSelector,
matchLabelKeys/mismatchLabelKeys), topology spread (maxSkew, minDomains,
whenUnsatisfiable, inclusion policies, matchLabelKeys), node images
(ImageLocality) and sidecars' host ports.

Images and sidecars are drawn from a second generator seeded from the same
seed, so adding them left every other draw of a seed as it was.
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
PRIORITY_CLASSES = {"diff-low": 10, "diff-mid": 100, "diff-high": 1000, "diff-high-never": 1000}
# Images nodes may report: (name without a tag, size in MiB). Sizes straddle
# ImageLocality's 23 MiB floor and its 1000 MiB per-container ceiling.
IMAGES = (("registry.example/base", 40), ("registry.example/app", 300), ("registry.example/ml", 2500))
MIB = 1024 * 1024
SIDECAR_PORT = 9090


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


def generate(seed: int, prefix: str) -> Scenario:
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
    if not plugins:
        plugins.add("NodeResourcesFit")
    return Scenario(seed, nodes, existing, pending, plugins, services, replica_set, budgets)
