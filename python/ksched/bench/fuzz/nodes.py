"""The ``nodes`` kind: odd Node objects among good ones.

Each odd node is a good KWOK node made odd, from the seed: allocatable and capacity huge
(``10Ei``), negative, fractional, unparsable or of the wrong type; hundreds of extended
resources; images with huge sizes and many names; odd labels; taints with unknown effects,
invalid keys, thousands of them; a price annotation of ``inf``, ``nan``, ``-1e999``, ``1e308``
or ``""``; a status or spec of the wrong type.

Offline (:func:`nodes_simulate`), each odd node goes into a cluster file with GOOD_NODES good
nodes and PODS pods that fit them, through ``ksched simulate --config`` (a price metric read
from the annotation) in process: exit 0, 1 or 2, one ``error:`` line for 2, never an exception;
and on 0 or 1 at least as many pods placed as without the odd node. Live
(:func:`nodes_live`, in the live phase while ``ksched run`` schedules), a batch of odd nodes
is created through the API server as KWOK nodes; ksched must stay healthy and bind fuzz pods,
never to a node that cannot hold them; the odd nodes are deleted after.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ksched.bench.fuzz.report import NAMESPACE, SETTLE_TIMEOUT_S, Cli, FuzzReport
from ksched.bench.fuzz.simulate import call_simulate, check_simulate
from ksched.cluster import local
from ksched.cluster.kwok import FAKE_NODE_ANNOTATION
from ksched.engine.quantity import parse_quantity
from ksched.errors import KschedError, QuantityError
from ksched.loop.client import Kube
from ksched.objects import Obj

KIND = "nodes"
PRICE = "ksched.io/price"
GOOD_NODES = 3
PODS = 6
# Live: fuzz pods created after the odd nodes, each must be bound to a node that holds it;
# every other one selects the good nodes (GOOD_LABEL), which odd nodes never carry.
LIVE_PODS = 40
GOOD_LABEL = ("type", "kwok")
# etcd's default request limit: a larger node is refused by the API server (HTTP 500 "request is
# too large", or the connection closed), which says nothing of ksched; such nodes stay offline.
LIVE_NODE_BYTES = 1_500_000
ODD_NODE_PREFIX = "fuzz-node-"

QUANTITIES: list[Any] = [
    "10Ei", "9223372036854775807", "1e30", "-1", "-4", "0", "0.5", "1.5m", "0.0001", "1e-9",
    "abc", "", " 4", "4 ", "4Qi", "NaN", "+Inf", None, [], {}, True, 1e308, -0.0, 2**70, "1e999",
]  # fmt: skip
PRICES: list[Any] = ["inf", "nan", "-1e999", "1e308", "", "-inf", "1e19", "-5", "0x10", "1_0", "  ", "0.5"]
EFFECTS: list[Any] = ["Sometimes", "", "noschedule", "NoSchedule ", None, 5, "PreferNoSchedule", "NoExecute"]
ODD_KEYS = ["", "a" * 400, "-bad", "example.com/", "x/y/z", "ключ", "k" * 63, "kubernetes.io/hostname"]


def good_nodes() -> list[Obj]:
    """GOOD_NODES KWOK nodes, each priced (the kinds that need good nodes share them)."""
    nodes: list[Obj] = local.fake_nodes(GOOD_NODES, 1)["items"]
    for i, n in enumerate(nodes):
        n["metadata"]["annotations"][PRICE] = str(1 + i)
    return nodes


def _base_odd(index: int) -> Obj:
    node: Obj = local.fake_nodes(1, 1, first=index)["items"][0]
    name = f"{ODD_NODE_PREFIX}{index:05d}"
    node["metadata"]["name"] = name
    node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    node["metadata"]["annotations"][PRICE] = "0.01"  # the cheapest: the odd node is preferred
    node["metadata"]["labels"][GOOD_LABEL[0]] = "kwok-odd"
    return node


def _at(node: Obj, *keys: str) -> Obj:
    """The mapping at ``keys`` in ``node``, made one where an earlier mutation left none."""
    obj = node
    for key in keys:
        if not isinstance(obj.get(key), dict):
            obj[key] = {}
        obj = obj[key]
    return obj


def _resources(node: Obj, rng: random.Random) -> str:
    field = rng.choice(["allocatable", "capacity"])
    key = rng.choice(["cpu", "memory", "pods", "ephemeral-storage", "nvidia.com/gpu"])
    value = rng.choice(QUANTITIES)
    _at(node, "status", field)[key] = value
    if rng.random() < 0.5:  # the two agree, so only the value is odd
        _at(node, "status", "capacity" if field == "allocatable" else "allocatable")[key] = value
    return f"status.{field}.{key}={value!r}"


def _extended(node: Obj, rng: random.Random) -> str:
    n = rng.choice([50, 300, 2000])
    for i in range(n):
        for field in ("allocatable", "capacity"):
            _at(node, "status", field)[f"example.com/r{i}"] = rng.choice(["1", "1k", "10Ei", "0"])
    return f"{n} extended resources"


def _images(node: Obj, rng: random.Random) -> str:
    size = rng.choice([2**62, 2**63 - 1, -1, 0, "x", 1e30, None])
    names = rng.choice([1, 50, 500])
    count = rng.choice([1, 100, 1000])
    _at(node, "status")["images"] = [
        {"names": [f"registry.example/img{i}-{j}:v1" for j in range(names)], "sizeBytes": size}
        for i in range(count)
    ]
    return f"{count} images of {names} names, size {size!r}"


def _labels(node: Obj, rng: random.Random) -> str:
    labels = _at(node, "metadata", "labels")
    choice = rng.randrange(4)
    if choice == 0:
        for i in range(rng.choice([100, 2000])):
            labels[f"fuzz.example/l{i}"] = "v" * rng.choice([0, 1, 63])
        return "many labels"
    if choice == 1:
        labels[rng.choice(ODD_KEYS)] = rng.choice(["", "v" * 64, "ü", "-x-"])
        return "an odd label"
    if choice == 2:
        labels["topology.kubernetes.io/zone"] = rng.choice(["", "z" * 64, None, 5])
        return "an odd zone"
    node["metadata"]["labels"] = rng.choice([None, [], "x", {"a": None}])
    return f"labels {node['metadata']['labels']!r}"


def _taints(node: Obj, rng: random.Random) -> str:
    spec = _at(node, "spec")
    choice = rng.randrange(4)
    if choice == 0:
        spec["taints"] = [
            {"key": rng.choice(ODD_KEYS), "value": "v", "effect": rng.choice(EFFECTS)} for _ in range(3)
        ]
        return f"taints {spec['taints']!r}"[:200]
    if choice == 1:
        spec["taints"] = [
            {"key": f"t{i}", "effect": "PreferNoSchedule"} for i in range(rng.choice([100, 3000]))
        ]
        return f"{len(spec['taints'])} taints"
    if choice == 2:
        spec["taints"] = rng.choice([None, "x", [None], [5], [{}], {"key": "a"}])
        return f"taints {spec['taints']!r}"
    spec["unschedulable"] = rng.choice([True, "yes", 1, None])
    return f"unschedulable {spec['unschedulable']!r}"


def _annotations(node: Obj, rng: random.Random) -> str:
    price = rng.choice(PRICES)
    _at(node, "metadata", "annotations")[PRICE] = price
    if rng.random() < 0.2:
        _at(node, "metadata", "annotations")["fuzz.example/big"] = "x" * rng.choice([1000, 200_000])
    return f"{PRICE}={price!r}"


def _shape(node: Obj, rng: random.Random) -> str:
    where, value = rng.choice(
        [
            ("status", "x"),
            ("status", None),
            ("status", []),
            ("spec", "x"),
            ("spec", []),
            ("status.allocatable", "x"),
            ("status.allocatable", []),
            ("status.allocatable", None),
            ("metadata.annotations", ["a"]),
            ("status.conditions", [{"type": "Ready", "status": "Maybe"}]),
            ("status.conditions", "x"),
        ]
    )
    *parents, leaf = where.split(".")
    target: Any = node
    for p in parents:
        target = target.get(p) if isinstance(target, dict) else None
    if isinstance(target, dict):
        target[leaf] = value
    return f"{where}={value!r}"


MUTATIONS: list[Callable[[Obj, random.Random], str]] = [
    _resources,
    _resources,
    _extended,
    _images,
    _labels,
    _taints,
    _annotations,
    _annotations,
    _shape,
]


def generate_nodes(count: int, seed: int) -> list[tuple[Obj, list[str]]]:
    """``count`` odd nodes, each with 1-3 mutations, and what was done to each."""
    rng = random.Random(f"nodes-{seed}")
    out = []
    for i in range(count):
        node = _base_odd(i)
        done = [m(node, rng) for m in rng.sample(MUTATIONS, rng.choice([1, 1, 2, 3]))]
        out.append((node, done))
    return out


def fitting_pods() -> list[Obj]:
    """PODS pods for ksched that the good nodes hold together."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"fit-{i}", "namespace": NAMESPACE},
            "spec": {
                "schedulerName": "ksched",
                "containers": [
                    {
                        "name": "app",
                        "image": "app",
                        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
                    }
                ],
            },
        }
        for i in range(PODS)
    ]


PRICE_CONFIG = {
    "apiVersion": "ksched.io/v1alpha1",
    "kind": "KschedConfiguration",
    "profiles": [{"schedulerName": "ksched"}],
    "metrics": [
        {
            "name": "price",
            "source": "annotation",
            "annotation": PRICE,
            "prefer": "lower",
            "weight": 2,
            "missing": "worst",
        }
    ],
}


def _placed(out: str) -> int:
    try:
        return sum(1 for p in json.loads(out)["placements"] if p.get("node"))
    except (ValueError, KeyError, TypeError):
        return -1


def nodes_simulate(report: FuzzReport, odd: list[tuple[Obj, list[str]]], workdir: Path, cli: Cli) -> None:
    """Each odd node among the good ones through ``simulate --config`` (a price metric)."""
    config = workdir / "nodes-config.yaml"
    config.write_text(yaml.safe_dump(PRICE_CONFIG))
    path = workdir / "nodes-cluster.json"
    good, pods = good_nodes(), fitting_pods()
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    args = ["--config", str(config)]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*good, namespace, *pods]}))
    baseline = call_simulate(cli, path, args)
    if baseline[0] != 0:
        raise KschedError(f"the nodes kind's good cluster does not place every pod: {baseline[1:]}")
    placed_without = _placed(baseline[1])
    for i, (node, done) in enumerate(odd):
        items = [*good[:1], node, *good[1:], namespace, *pods]
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        result = call_simulate(cli, path, args)
        code = check_simulate(report, "nodes simulate", i, result, len(pods), kind=KIND)
        report.count(KIND, f"simulate exit {code if code is not None else 'exception'}")
        if code in (0, 1) and _placed(result[1]) < placed_without:
            report.defect(
                "nodes simulate",
                i,
                f"{_placed(result[1])} pods placed, {placed_without} without the odd node: {'; '.join(done)}",
                kind=KIND,
            )


def _fits(node: Obj | None, cpu_m: int, memory: int) -> bool:
    """Whether ``node`` (as the API server holds it) can hold a pod requesting ``cpu_m``
    millicores and ``memory`` bytes: allocatable that parses and is large enough, pods
    allowed, and no NoSchedule or NoExecute taint (the fuzz pods tolerate none)."""
    if not node:
        return False
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    try:
        cpu = parse_quantity(allocatable.get("cpu", "0")) * 1000
        mem = parse_quantity(allocatable.get("memory", "0"))
        pods = parse_quantity(allocatable.get("pods", "0"))
    except (QuantityError, KschedError, TypeError, ValueError):
        return False
    taints = (node.get("spec") or {}).get("taints") or []
    hard = [t for t in taints if isinstance(t, dict) and t.get("effect") in ("NoSchedule", "NoExecute")]
    return cpu >= cpu_m and mem >= memory and pods >= 1 and not hard


def _live_pod(i: int) -> Obj:
    selector = {"nodeSelector": dict([GOOD_LABEL])} if i % 2 == 0 else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"fuzz-node-pod-{i}", "namespace": NAMESPACE},
        "spec": {
            "schedulerName": "ksched",
            **selector,
            "containers": [
                {"name": "app", "image": "app", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
            ],
        },
    }


def _create_odd(kube: Kube, report: FuzzReport, odd: list[tuple[Obj, list[str]]]) -> list[str]:
    created = []
    for original, _ in odd:
        node = copy.deepcopy(original)
        meta = node.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("annotations"), dict):
            meta["annotations"][FAKE_NODE_ANNOTATION] = "fake"
        body = json.dumps(node).encode()
        if len(body) > LIVE_NODE_BYTES:
            report.count(KIND, "live skipped (over etcd's request limit)")
            continue
        try:
            r = kube.request("POST", "/api/v1/nodes", raw=body, timeout=60)
        except KschedError as err:
            report.count(KIND, "live refused (no answer)")
            report.defect("nodes live", None, f"API server did not answer a node create: {err}", kind=KIND)
            continue
        if r.ok:
            created.append(str(r.json()["metadata"]["name"]))
            report.count(KIND, "live accepted by the API server")
        else:
            report.count(KIND, "live refused by the API server")
            if r.status >= 500:
                report.defect("nodes live", None, f"HTTP {r.status}: {r.data[:300]!r}", kind=KIND)
    return created


def nodes_live(
    kube: Kube, report: FuzzReport, odd: list[tuple[Obj, list[str]]], healthy: Callable[[], bool]
) -> None:
    """Odd KWOK nodes through the API server while ksched runs, then LIVE_PODS fuzz pods:
    each must be bound, to a node that holds it; ksched must stay healthy. The odd nodes and
    the pods are deleted after."""
    created = _create_odd(kube, report, odd)
    pods = [_live_pod(i) for i in range(LIVE_PODS)]
    try:
        for p in pods:
            kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=p)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        bound: dict[str, str] = {}
        while time.monotonic() < deadline and healthy():
            items = kube.request(
                "GET",
                f"/api/v1/namespaces/{NAMESPACE}/pods",
            ).json()["items"]
            bound = {
                p["metadata"]["name"]: p["spec"]["nodeName"]
                for p in items
                if p["metadata"]["name"].startswith("fuzz-node-pod-") and p["spec"].get("nodeName")
            }
            if len(bound) == LIVE_PODS:
                break
            time.sleep(1.0)
        if not healthy():
            report.defect("nodes live", None, f"ksched unhealthy with {len(created)} odd nodes", kind=KIND)
        if len(bound) < LIVE_PODS:
            report.defect(
                "nodes live",
                None,
                f"{LIVE_PODS - len(bound)} of {LIVE_PODS} pods not bound with odd nodes",
                kind=KIND,
            )
        nodes = {n["metadata"]["name"]: n for n in kube.request("GET", "/api/v1/nodes").json()["items"]}
        for pod, node in sorted(bound.items()):
            if node.startswith(ODD_NODE_PREFIX) and int(pod.rsplit("-", 1)[1]) % 2 == 0:
                report.defect("nodes live", None, f"{pod} selects the good nodes, bound to {node}", kind=KIND)
            if node.startswith(ODD_NODE_PREFIX):
                report.results[KIND]["live pod bound to an odd node"] += 1
                if not _fits(nodes.get(node), 100, 64 << 20):
                    report.defect(
                        "nodes live", None, f"{pod} bound to {node}, which cannot hold it", kind=KIND
                    )
            else:
                report.results[KIND]["live pod bound to a good node"] += 1
    finally:
        for p in pods:
            kube.request(
                "DELETE",
                f"/api/v1/namespaces/{NAMESPACE}/pods/{p['metadata']['name']}",
                query={"gracePeriodSeconds": 0},
            )
        for name in created:
            kube.request("DELETE", f"/api/v1/nodes/{name}")
