"""How a valid pod spec is made odd: the odd values (quantities, numbers, strings,
operators, effects, unicode), the mutators that put them in, weighted, and
:func:`generate`, which applies them from a seed."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from typing import Any

from ksched.bench.fuzz.report import NAMESPACE, Spec
from ksched.bench.fuzz.specs import base_pod, container
from ksched.objects import Obj

ODD_QUANTITIES: list[Any] = [
    "1e3", "0.0001m", "1Ki", "1e30", "-1", "", " 1", "1.5.5", "abc", "1E", "0x10", "1m", "0", "+1",
    ".5", "5.", "1e-3", "1ki", "9223372036854775807", "9223372036854775808", "99999999999999999999Ei",
    "1e308", "1e-400", "NaN", "Inf", "-0", "१", "\uff11", "1 Gi", "1Gi ", "1e", "e3", "1EiB", "0.1n",
    "123456789012345678901234567890", "-1e30", "1.0000000000000000001", "1Ti", "100000P", "1u", "1μ",
    1, 0, -5, 1.5, 1e30, True, None, [], {}, [1], {"a": 1},
]  # fmt: skip
HUGE_NUMBERS: list[Any] = [
    0, -1, 1, 2**31, 2**31 - 1, -(2**31) - 1, 2**63, -(2**63) - 1, 10**30, 1e308, -1e308, 1.5, "1", "high",
    "", None, True, [], {}, 65536, 65535, 100, 101,
]  # fmt: skip
BAD_STRINGS: list[Any] = [
    "", " ", "a" * 64, "a" * 254, "x" * 300 + "/y", "-bad", "bad-", "a/b/c", "/a", "a/", "ü", "😀", "ключ",
    "key with space", "a\nb", "a\x00b", "UPPER", "..", "a.b/c.d", "kubernetes.io/", "\u202eevil", "日本語",
    "\U0001d566\U0001d55f\U0001d55a", "a" * 10000, 5, None, [], {},
]  # fmt: skip
OPERATORS: list[Any] = [
    "Foo", "", "in", "IN", "Exists ", "Gt", "Lt", "DoesNotExist", "NotIn", "Equal", None, 5, [], "😀",
]  # fmt: skip
EFFECTS: list[Any] = ["Foo", "", "noschedule", "NoExecute", "PreferNoSchedule", None, 7, "😀", {}]
UNICODE: list[str] = [
    "ü",
    "😀",
    "日本語",
    "ключ",
    "\u202e",
    "\u0000",
    "\ud7ff",
    "ﬀ",
    "Ω",
    "\t",
    "\\",
    '"',
    "'",
]


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a JSON tree (dict keys and list indexes), the tree itself first."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for k, v in enumerate(obj):
            yield from _paths(v, (*prefix, k))


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    _get(obj, path[:-1])[path[-1]] = value


def _resource_maps(pod: Obj) -> list[dict[str, Any]]:
    """The requests/limits/overhead mappings of a pod (creating requests where none is)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return []
    maps: list[dict[str, Any]] = []
    for group in ("containers", "initContainers"):
        for c in spec.get(group) or []:
            if isinstance(c, dict) and isinstance(c.get("resources"), dict):
                for kind in ("requests", "limits"):
                    if isinstance(c["resources"].get(kind), dict):
                        maps.append(c["resources"][kind])
    if isinstance(spec.get("resources"), dict) and isinstance(spec["resources"].get("requests"), dict):
        maps.append(spec["resources"]["requests"])
    if isinstance(spec.get("overhead"), dict):
        maps.append(spec["overhead"])
    return maps


def _spec(pod: Obj) -> dict[str, Any]:
    if not isinstance(pod.get("spec"), dict):
        pod["spec"] = {}
    spec: dict[str, Any] = pod["spec"]
    return spec


def _first_container(pod: Obj) -> dict[str, Any]:
    spec = _spec(pod)
    if not isinstance(spec.get("containers"), list) or not spec["containers"]:
        spec["containers"] = [container("app")]
    c = spec["containers"][0]
    if not isinstance(c, dict):
        c = spec["containers"][0] = container("app")
    return c  # type: ignore[no-any-return]


def _rand_value(rng: random.Random, depth: int = 0) -> Any:
    pool = [*ODD_QUANTITIES, *HUGE_NUMBERS, *BAD_STRINGS, *OPERATORS]
    roll = rng.random()
    if roll < 0.05 and depth < 2:
        return [_rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if roll < 0.1 and depth < 2:
        return {
            str(rng.choice(BAD_STRINGS))[:40]: _rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))
        }
    return copy.deepcopy(rng.choice(pool))


def _deep(depth: int) -> Any:
    v: Any = {"key": "k", "operator": "Exists"}
    for _ in range(depth):
        v = {"a": v}
    return v


def m_quantity(pod: Obj, rng: random.Random) -> str:
    maps = _resource_maps(pod) or [
        _first_container(pod).setdefault("resources", {}).setdefault("requests", {})
    ]
    target = rng.choice(maps)
    name = rng.choice(
        ["cpu", "memory", "ephemeral-storage", "example.com/widget", "hugepages-2Mi", "pods", "😀/x"]
    )
    value = copy.deepcopy(rng.choice(ODD_QUANTITIES))
    target[name] = value
    return f"quantity {name}={value!r}"


def m_number(pod: Obj, rng: random.Random) -> str:
    spec = _spec(pod)
    value = copy.deepcopy(rng.choice(HUGE_NUMBERS))
    where = rng.choice(
        ["priority", "weight", "maxSkew", "minDomains", "containerPort", "hostPort", "tolerationSeconds",
         "terminationGracePeriodSeconds", "activeDeadlineSeconds", "gt"]
    )  # fmt: skip
    if where in ("priority", "terminationGracePeriodSeconds", "activeDeadlineSeconds"):
        spec[where] = value
    elif where == "weight":
        spec.setdefault("affinity", {})
        if isinstance(spec["affinity"], dict):
            spec["affinity"]["nodeAffinity"] = {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": value,
                        "preference": {"matchExpressions": [{"key": "type", "operator": "Exists"}]},
                    }
                ]
            }
    elif where in ("maxSkew", "minDomains"):
        tsc = {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "x"}},
        }
        tsc[where] = value
        spec["topologySpreadConstraints"] = [tsc]
    elif where in ("containerPort", "hostPort"):
        port = {
            "containerPort": 80,
            "hostPort": 81,
            "protocol": rng.choice(["TCP", "UDP", "SCTP", "tcp", "", None]),
        }
        port[where] = value
        _first_container(pod)["ports"] = [port]
    elif where == "tolerationSeconds":
        spec["tolerations"] = [
            {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": value}
        ]
    else:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "cpu", "operator": "Gt", "values": [value]}]}
                    ]
                }
            }
        }
    return f"number {where}={value!r}"


def m_operator(pod: Obj, rng: random.Random) -> str:
    spec = _spec(pod)
    op = copy.deepcopy(rng.choice(OPERATORS))
    values = copy.deepcopy(rng.choice([["a"], [], None, ["1", "2"], ["x"] * 3, "a", [1], [None], ["😀"]]))
    where = rng.choice(
        ["nodeAffinity", "nodeField", "podAffinity", "spreadSelector", "toleration", "taintEffect"]
    )
    expr: dict[str, Any] = {"key": rng.choice(["app", "kubernetes.io/hostname", "", "😀"]), "operator": op}
    if values is not None:
        expr["values"] = values
    if where == "nodeAffinity":
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expr]}]
                }
            }
        }
    elif where == "nodeField":
        expr["key"] = rng.choice(["metadata.name", "metadata.namespace", "spec.nodeName"])
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [expr]}]
                }
            }
        }
    elif where == "podAffinity":
        kind = rng.choice(["podAffinity", "podAntiAffinity"])
        spec["affinity"] = {
            kind: {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchExpressions": [expr]}}
                ]
            }
        }
    elif where == "spreadSelector":
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": rng.choice(["DoNotSchedule", "ScheduleAnyway", "Foo", "", None]),
                "labelSelector": {"matchExpressions": [expr]},
                "nodeAffinityPolicy": rng.choice(["Honor", "Ignore", "Foo", None]),
                "nodeTaintsPolicy": rng.choice(["Honor", "Ignore", "Foo", None]),
            }
        ]
    else:
        spec["tolerations"] = [
            {
                "key": expr["key"],
                "operator": rng.choice(["Equal", "Exists", "Foo", "", None, 3]),
                "value": rng.choice(["v", "", None, 5]),
                "effect": copy.deepcopy(rng.choice(EFFECTS)),
            }
        ]
    return f"operator {where} {op!r}"


def m_label(pod: Obj, rng: random.Random) -> str:
    bad = copy.deepcopy(rng.choice(BAD_STRINGS))
    spec = _spec(pod)
    where = rng.choice(
        ["labelKey", "labelValue", "nodeSelectorKey", "nodeSelectorValue", "matchLabels", "topologyKey"]
    )
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        meta = pod["metadata"] = {"name": "fuzz-label", "namespace": NAMESPACE}
    if where == "labelKey":
        meta["labels"] = {str(bad): "v"}
    elif where == "labelValue":
        meta["labels"] = {"app": bad}
    elif where == "nodeSelectorKey":
        spec["nodeSelector"] = {str(bad): "v"}
    elif where == "nodeSelectorValue":
        spec["nodeSelector"] = {"type": bad}
    elif where == "matchLabels":
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": bad}}}
                ]
            }
        }
    else:
        spec["topologySpreadConstraints"] = [
            {"maxSkew": 1, "topologyKey": bad, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
        ]
    return f"label {where}={str(bad)[:40]!r}"


def m_names(pod: Obj, rng: random.Random) -> str:
    spec = _spec(pod)
    c = _first_container(pod)
    where = rng.choice(["emptyContainer", "dupContainer", "dupPort", "dupVolume", "podName", "dupInit"])
    if where == "emptyContainer":
        c["name"] = rng.choice(["", None, "😀", "a" * 100, "UPPER"])
    elif where == "dupContainer":
        spec["containers"] = [copy.deepcopy(c), copy.deepcopy(c)]
    elif where == "dupInit":
        spec["initContainers"] = [copy.deepcopy(c)]
    elif where == "dupPort":
        port = {"name": "p", "containerPort": 80, "hostPort": 8080}
        c["ports"] = [port, dict(port), {**port, "protocol": "UDP"}]
    elif where == "dupVolume":
        spec["volumes"] = [
            {"name": "v", "emptyDir": {}},
            {"name": "v", "emptyDir": {}},
            {"name": "", "emptyDir": {}},
        ]
    else:
        meta = pod.get("metadata")
        if isinstance(meta, dict):
            meta["name"] = copy.deepcopy(rng.choice(["", "UPPER", "😀", "a" * 300, "-x", None, 5]))
    return f"names {where}"


def m_oversized(pod: Obj, rng: random.Random) -> str:
    spec = _spec(pod)
    n = rng.choice([100, 1000, 3000, 5000])
    where = rng.choice(
        ["tolerations", "terms", "expressions", "values", "containers", "nodeSelector", "spread", "deep"]
    )
    if where == "tolerations":
        spec["tolerations"] = [
            {"key": f"k{j}", "operator": "Exists", "effect": "NoSchedule"} for j in range(n)
        ]
    elif where == "terms":
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": f"k{j}", "operator": "In", "values": ["a", "b"]}]}
                        for j in range(n)
                    ]
                }
            }
        }
    elif where == "expressions":
        spec["affinity"] = {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1 + j % 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchExpressions": [{"key": f"k{j}", "operator": "Exists"}]},
                        },
                    }
                    for j in range(min(n, 1000))
                ]
            }
        }
    elif where == "values":
        spec["nodeSelector"] = None
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "type", "operator": "In", "values": [f"v{j}" for j in range(n)]}
                            ]
                        }
                    ]
                }
            }
        }
    elif where == "containers":
        spec["containers"] = [container(f"c{j}", "1m", "1Ki") for j in range(min(n, 1000))]
    elif where == "nodeSelector":
        spec["nodeSelector"] = {f"k{j}": "v" for j in range(n)}
    elif where == "spread":
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": f"k{j}",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": "x"}},
            }
            for j in range(min(n, 1000))
        ]
    else:
        spec["affinity"] = {"nodeAffinity": _deep(rng.choice([20, 100, 200]))}
    return f"oversized {where} x{n}"


def m_unicode(pod: Obj, rng: random.Random) -> str:
    strings = [p for p in _paths(pod) if p and isinstance(_get(pod, p), str)]
    if not strings:
        return "unicode (no string)"
    path = rng.choice(strings)
    old = _get(pod, path)
    _set(
        pod,
        path,
        old + rng.choice(UNICODE) if rng.random() < 0.5 else rng.choice(UNICODE) * rng.randint(1, 80),
    )
    return f"unicode at {'.'.join(map(str, path))}"


def m_missing(pod: Obj, rng: random.Random) -> str:
    paths = [p for p in _paths(pod) if p and p[0] not in ("apiVersion", "kind")]
    path = rng.choice(paths)
    parent = _get(pod, path[:-1])
    if isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])
    return f"missing {'.'.join(map(str, path))}"


def m_wrong_type(pod: Obj, rng: random.Random) -> str:
    paths = [p for p in _paths(pod) if p and p[0] not in ("apiVersion", "kind")]
    path = rng.choice(paths)
    old = _get(pod, path)
    choices: list[Any] = [None, "", "1", 1, -1, 1.5, True, [], {}, [old], {"x": old}, "😀", 2**70]
    value = copy.deepcopy(rng.choice(choices))
    _set(pod, path, value)
    return f"type {'.'.join(map(str, path))}={str(value)[:40]!r}"


def m_anything(pod: Obj, rng: random.Random) -> str:
    paths = [p for p in _paths(pod) if p]
    path = rng.choice(paths)
    value = _rand_value(rng)
    _set(pod, path, value)
    return f"value {'.'.join(map(str, path))}={str(value)[:40]!r}"


def m_scheduler(pod: Obj, rng: random.Random) -> str:
    spec = _spec(pod)
    what = rng.choice(["routed", "default", "other", "gates", "claims", "group", "bound", "nominated"])
    if what == "routed":
        spec.pop("schedulerName", None)
    elif what == "default":
        spec["schedulerName"] = "default-scheduler"
    elif what == "other":
        spec["schedulerName"] = copy.deepcopy(rng.choice(["😀", "", "KSCHED", "x" * 300, None, 1]))
    elif what == "gates":
        spec["schedulingGates"] = copy.deepcopy(
            rng.choice([[{"name": "example.com/gate"}], [{"name": ""}], [], [{}], "x"])
        )
    elif what == "claims":
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": rng.choice(["claim-a", "", None])}]
    elif what == "group":
        meta = pod.get("metadata")
        if isinstance(meta, dict):
            meta.setdefault("labels", {})
            if isinstance(meta["labels"], dict):
                meta["labels"]["scheduling.x-k8s.io/pod-group"] = rng.choice(
                    ["missing-group", "", "😀", "a" * 70]
                )
    elif what == "bound":
        spec["nodeName"] = rng.choice(["kwok-node-00000", "kwok-node-00001", "no-such-node", "", "😀"])
    else:
        pod.setdefault("status", {})
        if isinstance(pod["status"], dict):
            pod["status"]["nominatedNodeName"] = rng.choice(["kwok-node-00002", "no-such-node", "", 5])
    return f"scheduler {what}"


VALID_ODD_QUANTITIES = ["1e3", "0.0001m", "1Ki", "1n", "0", "1e-3", "12e-1", "1.5Mi", "100000m", "1E", "0.5"]


def m_valid_odd(pod: Obj, rng: random.Random) -> str:
    """Odd but valid: what the API server accepts, so the loop meets it."""
    spec = _spec(pod)
    c = _first_container(pod)
    meta = pod.get("metadata")
    what = rng.choice(
        ["quantity", "ports", "tolerations", "terms", "labels", "annotations", "skew", "weights", "name"]
    )
    if what == "quantity":
        resources = c.setdefault("resources", {})
        resources["requests"] = {
            "cpu": rng.choice(VALID_ODD_QUANTITIES),
            "memory": rng.choice(VALID_ODD_QUANTITIES),
            rng.choice(["ephemeral-storage", "example.com/widget"]): rng.choice(["1", "1e3", "1Ki"]),
        }
        resources["limits"] = {k: v for k, v in resources["requests"].items() if k == "example.com/widget"}
    elif what == "ports":
        c["ports"] = [{"containerPort": 65535, "hostPort": rng.choice([1, 65535, 8080])}]
    elif what == "tolerations":
        spec["tolerations"] = [
            {"key": f"k{j}", "operator": "Exists", "effect": rng.choice(["NoSchedule", "NoExecute", ""])}
            for j in range(rng.choice([10, 1000, 3000]))
        ]
    elif what == "terms":
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": f"k{j}", "operator": "DoesNotExist"}]}
                        for j in range(rng.choice([1, 100, 1000]))
                    ]
                }
            }
        }
    elif what == "labels" and isinstance(meta, dict):
        meta["labels"] = {"a" * 63: "b" * 63, "x.example.com/" + "c" * 63: "", "app": "fuzz"}
    elif what == "annotations" and isinstance(meta, dict):
        meta["annotations"] = {
            "ksched.io/note": "".join(UNICODE) * 10,
            "ksched.io/price": rng.choice(["1e3", "x"]),
        }
    elif what == "skew":
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": rng.choice([1, 2**31 - 1]),
                "minDomains": rng.choice([1, 2**31 - 1]),
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "fuzz"}},
            }
        ]
    elif what == "weights":
        spec["affinity"] = {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": w,
                        "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}},
                    }
                    for w in (1, 100)
                ]
            }
        }
    elif isinstance(meta, dict):
        meta["name"] = f"{meta.get('name')}-{'z' * 200}"[:253]
    return f"valid odd {what}"


MUTATORS: list[tuple[float, Callable[[Obj, random.Random], str]]] = [
    (6, m_valid_odd),
    (3, m_quantity),
    (2, m_number),
    (2, m_operator),
    (2, m_label),
    (1, m_names),
    (0.6, m_oversized),
    (1, m_unicode),
    (1, m_missing),
    (1.5, m_wrong_type),
    (1.5, m_anything),
    (1.5, m_scheduler),
]


def generate(count: int, seed: int) -> list[Spec]:
    """``count`` specs, each a valid pod with one to three seeded mutations (one in twenty unmutated)."""
    rng = random.Random(seed)
    weights = [w for w, _ in MUTATORS]
    out = []
    for i in range(count):
        pod = base_pod(i)
        names: list[str] = []
        if rng.random() >= 0.05:
            for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
                (fn,) = rng.choices([f for _, f in MUTATORS], weights)
                before = copy.deepcopy(pod)
                try:
                    names.append(fn(pod, rng))
                except (TypeError, KeyError, IndexError, AttributeError, ValueError):
                    pod = before  # an earlier mutation left nothing for this one to work on
        out.append(Spec(i, pod, names))
    return out
