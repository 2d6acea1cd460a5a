"""``ksched bench --fuzz``: tens of thousands of odd pod specs at the API server, the loop,
``simulate`` and the webhook.

Specs are mutated, from a seed, from a few valid pods: odd quantities, huge and negative
numbers, unknown operators and effects, invalid labels, empty and duplicate names, large
and deep affinity trees, unicode, oversized lists, missing fields, wrong types. Each spec is

* created through the local control plane's API server, in a namespace whose pods go
  through ksched's webhook (``failurePolicy: Fail``, so a webhook error shows up as a
  refused pod), with ``ksched run`` scheduling on KWOK nodes; each accepted pod must end
  bound, or pending with a ``FailedScheduling`` event, or be another scheduler's, gated,
  or a preemption victim; ksched must stay alive and healthy and log no traceback;
* fed alone to ``ksched simulate`` in process (the CLI's own ``main``), and the accepted
  pods, as the API server returned them, in batches: the exit code must be 0, 1 or 2,
  exit 2 with one ``error:`` line, never an exception, and every unplaced pod a message.

Then malformed AdmissionReview requests are sent straight to the webhook (bad and truncated
JSON, wrong kinds, missing fields, non-object pods, huge bodies, wrong content types and
methods): each must be answered, never with a 5xx, and the webhook must keep answering.

Every failed check is a defect; the command prints the counts and exits 1 if there is any.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import copy
import io
import json
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ksched.cluster import local
from ksched.errors import KschedError
from ksched.loop.client import Kube, load_configuration
from ksched.objects import Obj

NAMESPACE = "ksched-fuzz"
ROUTE_LABEL = "ksched.io/fuzz-route"
MWC_NAME = "ksched-fuzz"
FUZZ_NODES = 12
CREATE_WORKERS = 16
# Pods created per round: the round settles, its outcomes are read, its pods are deleted.
ROUND = 1000
SETTLE_TIMEOUT_S = 120.0
# Accepted pods per `simulate` batch.
SIM_BATCH = 250
# Defects listed in full (the counts are always complete).
DEFECTS_KEPT = 200
# The command line's entry: arguments in, exit code out.
Cli = Callable[[list[str]], int]

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


@dataclass
class Spec:
    index: int
    pod: Obj
    mutations: list[str]


@dataclass
class Defect:
    where: str
    spec: int | None
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"where": self.where, "spec": self.spec, "detail": self.detail}


@dataclass
class FuzzReport:
    seed: int
    specs: int
    live_specs: int = 0
    accepted: int = 0
    rejected: int = 0
    rejected_by_webhook: int = 0
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    routed_by_webhook: int = 0
    simulate_calls: int = 0
    simulate_exit: collections.Counter[int] = field(default_factory=collections.Counter)
    simulate_batches: int = 0
    simulate_batch_exit: collections.Counter[int] = field(default_factory=collections.Counter)
    webhook_requests: int = 0
    webhook_seconds: dict[str, float] = field(default_factory=dict)
    webhook_status: collections.Counter[int] = field(default_factory=collections.Counter)
    ksched_alive: bool = True
    ksched_tracebacks: int = 0
    defects: list[Defect] = field(default_factory=list)
    defect_count: int = 0
    seconds: float = 0.0

    def defect(self, where: str, spec: int | None, detail: str) -> None:
        self.defect_count += 1
        if len(self.defects) < DEFECTS_KEPT:
            self.defects.append(Defect(where, spec, detail[:600]))

    def as_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "specs": self.specs,
            "apiServer": {
                "created": self.live_specs,
                "accepted": self.accepted,
                "rejected": self.rejected,
                "rejectedByWebhook": self.rejected_by_webhook,
                "routedByWebhook": self.routed_by_webhook,
                "outcomes": dict(sorted(self.outcomes.items())),
            },
            "simulate": {
                "calls": self.simulate_calls,
                "exitCodes": {str(k): v for k, v in sorted(self.simulate_exit.items())},
                "batches": self.simulate_batches,
                "batchExitCodes": {str(k): v for k, v in sorted(self.simulate_batch_exit.items())},
            },
            "webhook": {
                "requests": self.webhook_requests,
                "statuses": {str(k): v for k, v in sorted(self.webhook_status.items())},
            },
            "ksched": {"alive": self.ksched_alive, "tracebacks": self.ksched_tracebacks},
            "defects": self.defect_count,
            "defectList": [d.as_json() for d in self.defects],
            "seconds": round(self.seconds, 1),
        }

    def render(self) -> str:
        j = self.as_json()
        api, sim, hook = j["apiServer"], j["simulate"], j["webhook"]
        lines = [
            f"ksched bench --fuzz: seed {self.seed}, {self.specs} specs, {self.seconds:.0f} s",
            f"  API server      {api['created']} created: {api['accepted']} accepted, {api['rejected']} rejected "
            f"({api['rejectedByWebhook']} by the webhook), {api['routedByWebhook']} routed by the webhook",
            "  accepted pods   "
            + (", ".join(f"{k} {v}" for k, v in api["outcomes"].items()) or "none")
            + f"; ksched alive: {'yes' if self.ksched_alive else 'NO'}, tracebacks logged: {self.ksched_tracebacks}",
            f"  simulate        {sim['calls']} specs alone, exit codes "
            + ", ".join(f"{k}: {v}" for k, v in sim["exitCodes"].items())
            + f"; {sim['batches']} batches of accepted pods, exit codes "
            + (", ".join(f"{k}: {v}" for k, v in sim["batchExitCodes"].items()) or "none"),
            f"  webhook         {hook['requests']} malformed requests, statuses "
            + ", ".join(f"{k}: {v}" for k, v in hook["statuses"].items()),
            f"  defects         {self.defect_count}",
        ]
        for d in self.defects[:20]:
            spec = "" if d.spec is None else f" (spec {d.spec})"
            lines.append(f"    {d.where}{spec}: {d.detail}")
        return "\n".join(lines)


# -- specs --------------------------------------------------------------------


def _container(name: str, cpu: str = "100m", memory: str = "64Mi") -> Obj:
    return {"name": name, "image": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}


def base_pod(i: int) -> Obj:
    """One of six valid pods (by ``i``): plain; node affinity; tolerations, ports and
    priority class-free limits; topology spread and anti-affinity; init containers,
    volumes and extended resources; pod affinity and pod-level resources."""
    app = f"fuzz-{i % 7}"
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"fuzz-{i}", "namespace": NAMESPACE, "labels": {"app": app, "tier": "t"}},
        "spec": {"schedulerName": "ksched", "containers": [_container("app")]},
    }
    spec = pod["spec"]
    zone = "topology.kubernetes.io/zone"
    kind = i % 6
    if kind == 1:
        spec["nodeSelector"] = {"kubernetes.io/os": "linux"}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": zone, "operator": "In", "values": ["local-1a", "local-1b"]}
                            ]
                        }
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "preference": {
                            "matchExpressions": [
                                {"key": "node.kubernetes.io/instance-type", "operator": "Exists"}
                            ]
                        },
                    }
                ],
            }
        }
    elif kind == 2:
        spec["tolerations"] = [
            {"key": "dedicated", "operator": "Equal", "value": "fuzz", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 30,
            },
        ]
        spec["containers"][0]["ports"] = [
            {"name": "http", "containerPort": 8080, "hostPort": 20000 + i % 5000}
        ]
        spec["containers"][0]["resources"]["limits"] = {"cpu": "200m", "memory": "128Mi"}
    elif kind == 3:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": zone,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": app}},
            }
        ]
        spec["affinity"] = {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 50,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {
                                "matchExpressions": [{"key": "app", "operator": "In", "values": [app]}]
                            },
                        },
                    }
                ]
            }
        }
    elif kind == 4:
        spec["initContainers"] = [_container("init", "300m", "32Mi")]
        spec["containers"].append(_container("sidecar", "50m", "16Mi"))
        spec["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "1Gi"
        spec["containers"][0]["resources"]["requests"]["example.com/widget"] = "1"
        spec["containers"][0]["resources"]["limits"] = {"example.com/widget": "1"}
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    elif kind == 5:
        spec["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": zone, "labelSelector": {"matchLabels": {"tier": "t"}}}
                ]
            }
        }
        spec["resources"] = {"requests": {"cpu": "300m", "memory": "128Mi"}}
    return pod


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
        spec["containers"] = [_container("app")]
    c = spec["containers"][0]
    if not isinstance(c, dict):
        c = spec["containers"][0] = _container("app")
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
        spec["containers"] = [_container(f"c{j}", "1m", "1Ki") for j in range(min(n, 1000))]
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


# -- simulate -----------------------------------------------------------------


def _simulate_nodes() -> list[Obj]:
    nodes: list[Obj] = local.fake_nodes(FUZZ_NODES, 3)["items"]
    nodes[-1]["spec"] = {"taints": [{"key": "dedicated", "value": "fuzz", "effect": "NoSchedule"}]}
    return nodes


def _call_simulate(cli: Cli, path: Path) -> tuple[int | None, str, str, str | None]:
    """``ksched simulate PATH -o json`` in process: (exit code, stdout, stderr, escaped exception)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli(["simulate", str(path), "-o", "json"])
    except BaseException as exc:  # a traceback is what the fuzzer looks for
        if isinstance(exc, KeyboardInterrupt):
            raise
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return (
            None,
            out.getvalue(),
            err.getvalue(),
            f"{type(exc).__name__}: {exc} at {frame.filename}:{frame.lineno}",
        )
    return code, out.getvalue(), err.getvalue(), None


def _check_simulate(
    report: FuzzReport,
    where: str,
    spec: int | None,
    result: tuple[int | None, str, str, str | None],
    pods: int,
) -> int | None:
    code, out, err, escaped = result
    if escaped is not None:
        report.defect(where, spec, f"traceback: {escaped}")
        return None
    if code == 2:
        lines = err.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("error: "):
            report.defect(where, spec, f"exit 2 without a one-line message: {err[:300]!r}")
    elif code in (0, 1):
        try:
            placements = json.loads(out)["placements"]
        except (ValueError, KeyError, TypeError):
            report.defect(where, spec, f"exit {code} without JSON placements: {out[:200]!r}")
            return code
        if len(placements) > pods:
            report.defect(where, spec, f"{len(placements)} placements for {pods} pods")
        for p in placements:
            if not p.get("node") and not p.get("message"):
                report.defect(where, spec, f"pod {p.get('pod')} not placed and no message")
        if code == 1 and all(p.get("node") for p in placements):
            report.defect(where, spec, "exit 1 with every pod placed")
    else:
        report.defect(where, spec, f"exit code {code}")
    return code


def _write_cluster(path: Path, objects: list[Any], as_yaml: bool) -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": objects}
    if as_yaml:
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    else:
        path.write_text(json.dumps(doc))


def simulate_phase(
    report: FuzzReport, specs: list[Spec], accepted: list[Obj], workdir: Path, cli: Cli
) -> None:
    """Every spec alone, then the accepted pods (as the API server returned them) in batches."""
    nodes = _simulate_nodes()
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {"x": "y"}},
    }
    path = workdir / "simulate-cluster"
    for s in specs:
        try:
            _write_cluster(path, [*nodes, namespace, s.pod], as_yaml=s.index % 4 == 3)
        except (ValueError, TypeError, RecursionError, yaml.YAMLError):
            _write_cluster(path, [*nodes, namespace, s.pod], as_yaml=False)
        report.simulate_calls += 1
        code = _check_simulate(report, "simulate", s.index, _call_simulate(cli, path), 1)
        report.simulate_exit[-1 if code is None else code] += 1
    for start in range(0, len(accepted), SIM_BATCH):
        batch = [_as_pending(p) for p in accepted[start : start + SIM_BATCH]]
        _write_cluster(path, [*nodes, namespace, *batch], as_yaml=(start // SIM_BATCH) % 2 == 1)
        report.simulate_batches += 1
        code = _check_simulate(report, "simulate batch", None, _call_simulate(cli, path), len(batch))
        report.simulate_batch_exit[-1 if code is None else code] += 1


def _as_pending(pod: Obj) -> Obj:
    """An accepted pod as a cluster file would list it, for ksched unless it was bound at creation."""
    pod = copy.deepcopy(pod)
    pod.pop("status", None)
    spec = pod.get("spec") or {}
    if not spec.get("nodeName"):
        spec["schedulerName"] = "ksched"
    return pod


# -- the live cluster -----------------------------------------------------------


def _webhook_configuration(port: int, ca: str | None = None) -> Obj:
    client: dict[str, Any] = {"url": f"https://127.0.0.1:{port}/mutate"}
    if ca:
        client["caBundle"] = ca
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": MWC_NAME},
        "webhooks": [
            {
                "name": "fuzz.ksched.io",
                "clientConfig": client,
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {ROUTE_LABEL: "true"}},
                # Fail, not Ignore: a webhook error refuses the pod, so the fuzzer sees it.
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 15,
            }
        ],
    }


@dataclass
class _Ksched:
    proc: subprocess.Popen[bytes]
    port: int
    webhook_port: int
    log: Path

    def get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as err:
            return int(err.code)
        except OSError:
            return 0

    def healthy(self) -> bool:
        return self.proc.poll() is None and self.get("/healthz") == 200

    def tracebacks(self) -> list[str]:
        """The exception line of each traceback in ksched's log."""
        lines = self.log.read_text(errors="replace").splitlines()
        out = []
        for i, line in enumerate(lines):
            if line.startswith("Traceback (most recent call last)"):
                j = i + 1
                while j < len(lines) and (lines[j].startswith(" ") or lines[j].startswith("^")):
                    j += 1
                out.append(lines[j] if j < len(lines) else "(truncated)")
        return out


def _start_ksched(state: local.ClusterState, workdir: Path, hook_port: int) -> _Ksched:
    port = local.free_port()
    config = {
        "apiVersion": "ksched.io/v1alpha1",
        "kind": "KschedConfiguration",
        "leaderElection": {"leaderElect": False},
        "webhook": {
            "enabled": True,
            "address": f"127.0.0.1:{hook_port}",
            "hosts": ["127.0.0.1"],
            "configurationName": MWC_NAME,
        },
    }
    path = workdir / "ksched-fuzz.yaml"
    path.write_text(yaml.safe_dump(config))
    log = workdir / "ksched.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "ksched.commands.cli", "run", "--config", str(path)),
                *("--kubeconfig", state.kubeconfig, "--address", f"127.0.0.1:{port}"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    k = _Ksched(proc, port, hook_port, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise KschedError(f"ksched run exited:\n{log.read_text(errors='replace')[-2000:]}")
        if k.get("/readyz") == 200:
            return k
        time.sleep(0.2)
    _stop(k)
    raise KschedError(f"ksched did not become ready:\n{log.read_text(errors='replace')[-2000:]}")


def _stop(k: _Ksched) -> None:
    if k.proc.poll() is None:
        k.proc.send_signal(signal.SIGTERM)
        try:
            k.proc.wait(30)
        except subprocess.TimeoutExpired:
            k.proc.kill()
            k.proc.wait()


def _wait_routing(kube: Kube) -> None:
    """Until the API server calls the webhook with its CA and the webhook routes a plain pod."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "app", "image": "app"}]},
    }
    deadline = time.monotonic() + 60
    last = ""
    while time.monotonic() < deadline:
        r = kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"dryRun": "All"}, body=probe)
        if r.ok and r.json()["spec"].get("schedulerName") == "ksched":
            return
        last = r.data[:300].decode(errors="replace")
        time.sleep(0.5)
    raise KschedError(f"the API server does not call ksched's webhook: {last}")


def _delete_all(kube: Kube) -> None:
    kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"gracePeriodSeconds": 0})
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"limit": 1}).json()["items"]:
        if time.monotonic() > deadline:
            raise KschedError(f"the pods in {NAMESPACE} were not deleted")
        time.sleep(0.5)


def _create_round(kube: Kube, report: FuzzReport, specs: list[Spec]) -> list[tuple[Spec, Obj]]:
    def post(s: Spec) -> tuple[Spec, int, bytes]:
        body = json.dumps(s.pod).encode()
        try:
            r = kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", raw=body, timeout=60)
        except KschedError as err:
            return s, 0, str(err).encode()
        return s, r.status, r.data

    accepted = []
    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        for s, status, data in pool.map(post, specs):
            report.live_specs += 1
            if status in (200, 201):
                report.accepted += 1
                accepted.append((s, json.loads(data)))
                continue
            report.rejected += 1
            text = data.decode(errors="replace")
            if "webhook" in text and "ksched" in text:
                report.rejected_by_webhook += 1
                report.defect("webhook via API server", s.index, f"HTTP {status}: {text[:300]}")
            elif status >= 500 or status == 0:
                report.defect("API server", s.index, f"HTTP {status}: {text[:300]}")
    return accepted


def _outcome(pod: Obj, created: Obj, events: dict[str, list[str]], preempted: set[str]) -> str | None:
    """What became of an accepted pod, None while it is pending for ksched without an event."""
    spec = pod.get("spec") or {}
    uid = pod["metadata"]["uid"]
    if created["spec"].get("nodeName"):
        return "bound at creation (spec.nodeName)"
    if spec.get("nodeName"):
        return "bound"
    if spec.get("schedulingGates"):
        return "gated"
    if spec.get("schedulerName") != "ksched":
        return "another scheduler's"
    if any(events.get(uid, [])):
        return "pending with FailedScheduling"
    if uid in preempted:
        return "preempted"
    return None


def _settle(kube: Kube, report: FuzzReport, accepted: list[tuple[Spec, Obj]], k: _Ksched) -> None:
    """Wait until every accepted pod of the round has an outcome, then count them."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    pending: list[tuple[Spec, Obj]] = accepted
    outcomes: dict[str, str] = {}
    while True:
        items = {
            p["metadata"]["uid"]: p
            for p in kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods").json()["items"]
        }
        events: dict[str, list[str]] = collections.defaultdict(list)
        preempted: set[str] = set()
        for e in kube.request("GET", f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events").json()["items"]:
            regarding = e.get("regarding") or {}
            if e.get("reason") == "FailedScheduling":
                events[regarding.get("uid", "")].append(e.get("note") or "")
            elif e.get("reason") == "Preempted":
                preempted.add(regarding.get("uid", ""))
        still = []
        for s, created in pending:
            uid = created["metadata"]["uid"]
            pod = items.get(uid)
            if pod is None:
                outcomes[uid] = "preempted" if uid in preempted else "deleted"
                continue
            outcome = _outcome(pod, created, events, preempted)
            if outcome is None:
                still.append((s, created))
            else:
                outcomes[uid] = outcome
        pending = still
        if not pending or time.monotonic() > deadline or not k.healthy():
            break
        time.sleep(1.0)
    for s, created in accepted:
        uid = created["metadata"]["uid"]
        outcome = outcomes.get(uid, "silently pending")
        report.outcomes[outcome] += 1
        if outcome in ("silently pending", "deleted"):
            report.defect("loop", s.index, f"{outcome}: {'; '.join(s.mutations) or 'unmutated'}")
        if (
            not (s.pod.get("spec") or {}).get("schedulerName")
            and created["spec"].get("schedulerName") == "ksched"
            and isinstance(created.get("metadata", {}).get("annotations"), dict)
            and created["metadata"]["annotations"].get("ksched.io/routed-by") == "webhook"
        ):
            report.routed_by_webhook += 1


def live_phase(report: FuzzReport, state: local.ClusterState, specs: list[Spec], workdir: Path) -> list[Obj]:
    """Create the specs through the API server with ksched and its webhook running; returns
    the accepted pods as the API server returned them."""
    kube = Kube(load_configuration(state.kubeconfig, CREATE_WORKERS + 4), qps=5000, burst=5000)
    r = kube.request(
        "POST",
        "/api/v1/namespaces",
        body={"metadata": {"name": NAMESPACE, "labels": {ROUTE_LABEL: "true"}}},
    )
    if not r.ok and r.status != 409:
        raise KschedError(f"cannot create namespace {NAMESPACE}: HTTP {r.status}")
    mwc_path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{MWC_NAME}"
    kube.request("DELETE", mwc_path)
    _delete_all(kube)
    hook_port = local.free_port()
    # ksched writes its CA into the configuration when it starts, so the configuration comes first.
    r = kube.request(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        body=_webhook_configuration(hook_port),
    )
    if not r.ok:
        raise KschedError(f"cannot create the webhook configuration: HTTP {r.status}: {r.data[:200]!r}")
    accepted_all: list[Obj] = []
    k: _Ksched | None = None
    try:
        k = _start_ksched(state, workdir, hook_port)
        _wait_routing(kube)
        for start in range(0, len(specs), ROUND):
            accepted = _create_round(kube, report, specs[start : start + ROUND])
            accepted_all += [created for _, created in accepted]
            _settle(kube, report, accepted, k)
            if not k.healthy():
                report.ksched_alive = False
                report.defect("loop", None, f"ksched stopped answering /healthz after spec {start + ROUND}")
                break
            _delete_all(kube)
        webhook_phase(report, k.webhook_port, k.healthy)
        report.ksched_alive = report.ksched_alive and k.healthy()
        if not report.ksched_alive:
            report.defect("loop", None, "ksched is not alive and healthy at the end")
    finally:
        kube.request("DELETE", mwc_path)
        if k is not None:
            _stop(k)
        _delete_all(kube)
        kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}")
    tracebacks = k.tracebacks()
    report.ksched_tracebacks = len(tracebacks)
    for line in collections.Counter(tracebacks):
        report.defect("loop", None, f"ksched logged a traceback: {line}")
    return accepted_all


# -- the webhook ----------------------------------------------------------------


def review(obj: Any = None, uid: Any = "fuzz-uid", **request: Any) -> Obj:
    """An AdmissionReview for a pod CREATE (``obj`` the pod), with ``request`` fields overridden."""
    pod = obj if obj is not None else {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}}
    req: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "namespace": NAMESPACE,
        "object": pod,
        **request,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def _j(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def malformed_requests() -> list[tuple[str, str, dict[str, str], bytes, str]]:
    """(name, method, headers, body, how): ``how`` is ``send`` (whole body, right length),
    ``short`` (a longer Content-Length than sent, then nothing: the webhook times out), or ``raw``
    (``headers`` sent exactly as given, no Content-Length added)."""
    js = {"Content-Type": "application/json"}
    good = review()
    cases: list[tuple[str, str, dict[str, str], bytes, str]] = [
        ("valid review", "POST", js, _j(good), "send"),
        ("empty body", "POST", js, b"", "send"),
        ("not JSON", "POST", js, b"not json at all", "send"),
        ("truncated JSON", "POST", js, _j(good)[:37], "send"),
        ("invalid UTF-8", "POST", js, b'{"kind": "\xff\xfe"}', "send"),
        ("JSON null", "POST", js, b"null", "send"),
        ("JSON list", "POST", js, b"[]", "send"),
        ("JSON number", "POST", js, b"12", "send"),
        ("JSON string", "POST", js, b'"AdmissionReview"', "send"),
        ("empty object", "POST", js, b"{}", "send"),
        ("NaN and Infinity", "POST", js, _j(good).replace(b'"fuzz-uid"', b"NaN", 1), "send"),
        ("deep nesting", "POST", js, b"[" * 100000 + b"]" * 100000, "send"),
        ("deep object", "POST", js, b'{"request":' * 50000 + b"1" + b"}" * 50000, "send"),
        ("wrong kind", "POST", js, _j({**good, "kind": "Pod"}), "send"),
        ("no kind", "POST", js, _j({k: v for k, v in good.items() if k != "kind"}), "send"),
        ("wrong apiVersion", "POST", js, _j({**good, "apiVersion": "admission.k8s.io/v2"}), "send"),
        ("v1beta1 apiVersion", "POST", js, _j({**good, "apiVersion": "admission.k8s.io/v1beta1"}), "send"),
        ("apiVersion number", "POST", js, _j({**good, "apiVersion": 1}), "send"),
        ("no request", "POST", js, _j({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), "send"),
        ("request null", "POST", js, _j({**good, "request": None}), "send"),
        ("request list", "POST", js, _j({**good, "request": [good["request"]]}), "send"),
        ("request string", "POST", js, _j({**good, "request": "x"}), "send"),
        ("no uid", "POST", js, _j(review(uid=None)), "send"),
        ("uid number", "POST", js, _j(review(uid=5)), "send"),
        ("uid list", "POST", js, _j(review(uid=["a"])), "send"),
        ("uid empty", "POST", js, _j(review(uid="")), "send"),
        ("uid huge", "POST", js, _j(review(uid="u" * 1_000_000)), "send"),
        ("no object", "POST", js, _j({**good, "request": {"uid": "u", "operation": "CREATE"}}), "send"),
        ("object null", "POST", js, _j(review(object=None)), "send"),
        ("object list", "POST", js, _j(review(object=[1, 2])), "send"),
        ("object string", "POST", js, _j(review(object="pod")), "send"),
        ("object number", "POST", js, _j(review(object=7)), "send"),
        ("spec list", "POST", js, _j(review({"spec": []})), "send"),
        ("spec string", "POST", js, _j(review({"spec": "x"})), "send"),
        ("metadata string", "POST", js, _j(review({"metadata": "x", "spec": {}})), "send"),
        ("annotations list", "POST", js, _j(review({"metadata": {"annotations": ["a"]}, "spec": {}})), "send"),
        ("annotations string", "POST", js, _j(review({"metadata": {"annotations": "a"}, "spec": {}})), "send"),
        ("schedulerName number", "POST", js, _j(review({"spec": {"schedulerName": 5}})), "send"),
        ("schedulerName list", "POST", js, _j(review({"spec": {"schedulerName": []}})), "send"),
        ("resourceClaims string", "POST", js, _j(review({"spec": {"resourceClaims": "x"}})), "send"),
        ("resourceClaims numbers", "POST", js, _j(review({"spec": {"resourceClaims": [1, None]}})), "send"),
        ("operation DELETE", "POST", js, _j(review(operation="DELETE")), "send"),
        ("operation UPDATE", "POST", js, _j(review(operation="UPDATE", oldObject={"spec": {}})), "send"),
        ("operation number", "POST", js, _j(review(operation=5)), "send"),
        ("kind of request Deployment", "POST", js, _j(review(kind={"group": "apps", "version": "v1", "kind": "Deployment"})), "send"),
        ("unicode pod", "POST", js, _j(review({"metadata": {"name": "😀ü", "annotations": {"ключ": "日本語"}}, "spec": {"schedulerName": ""}})), "send"),
        ("huge body 20 MiB", "POST", js, _j(review({"metadata": {"annotations": {"a": "x" * (20 << 20)}}, "spec": {}})), "send"),
        ("content type text/plain", "POST", {"Content-Type": "text/plain"}, _j(good), "send"),
        ("content type form", "POST", {"Content-Type": "application/x-www-form-urlencoded"}, _j(good), "send"),
        ("no content type", "POST", {}, _j(good), "send"),
        ("short body", "POST", js, _j(good), "short"),
        ("Content-Length not a number", "POST", {**js, "Content-Length": "abc"}, _j(good), "raw"),
        ("Content-Length negative", "POST", {**js, "Content-Length": "-5"}, _j(good), "raw"),
        ("Content-Length huge", "POST", {**js, "Content-Length": str(1 << 40)}, _j(good), "raw"),
        ("no Content-Length", "POST", js, _j(good), "raw"),
        (
            "chunked",
            "POST",
            {**js, "Transfer-Encoding": "chunked"},
            f"{len(_j(good)):x}\r\n".encode() + _j(good) + b"\r\n0\r\n\r\n",
            "raw",
        ),
        ("GET", "GET", {}, b"", "send"),
        ("PUT", "PUT", js, _j(good), "send"),
        ("DELETE", "DELETE", {}, b"", "send"),
        ("PATCH", "PATCH", js, _j(good), "send"),
        ("HEAD", "HEAD", {}, b"", "send"),
        ("OPTIONS", "OPTIONS", {}, b"", "send"),
        ("other path", "POST", js, _j(good), "send"),
    ]  # fmt: skip
    return cases


def _exchange(
    port: int, method: str, path: str, headers: dict[str, str], body: bytes, how: str
) -> tuple[int, bytes]:
    """One request over TLS: (status, body); status 0 when no HTTP answer came back."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if how == "send":
        head.append(f"Content-Length: {len(body)}")
    elif how == "short":
        head.append(f"Content-Length: {len(body) + 1000}")
    head += [f"{k}: {v}" for k, v in headers.items()]
    data = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    chunks: list[bytes] = []
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
            context.wrap_socket(raw) as s,
        ):
            with contextlib.suppress(OSError):  # the server may answer before reading a huge body
                s.sendall(data)
            while True:
                try:
                    chunk = s.recv(65536)
                except OSError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError:
        return 0, b""
    reply = b"".join(chunks)
    try:
        status = int(reply.split(b"\r\n", 1)[0].split()[1])
    except (IndexError, ValueError):
        return 0, reply[:200]
    return status, reply.split(b"\r\n\r\n", 1)[-1]


def _check_answer(report: FuzzReport, name: str, status: int, body: bytes, sent: bytes) -> None:
    if status == 0:
        report.defect("webhook", None, f"{name}: no HTTP answer")
    elif status >= 500:
        report.defect("webhook", None, f"{name}: HTTP {status}: {body[:200]!r}")
    elif status == 200:
        try:
            answer = json.loads(body)
            response = answer["response"]
            uid = json.loads(sent)["request"]["uid"]
        except (ValueError, KeyError, TypeError) as err:
            report.defect(
                "webhook",
                None,
                f"{name}: HTTP 200 that is not an AdmissionReview answer ({err}): {body[:200]!r}",
            )
            return
        if answer.get("kind") != "AdmissionReview" or not isinstance(response.get("allowed"), bool):
            report.defect("webhook", None, f"{name}: malformed AdmissionReview answer: {body[:200]!r}")
        elif not isinstance(uid, str) or not uid or response.get("uid") != uid:
            report.defect(
                "webhook",
                None,
                f"{name}: answered uid {response.get('uid')!r} to a request uid {str(uid)[:40]!r}",
            )
        elif "patch" in response:
            try:
                patch = json.loads(base64.b64decode(response["patch"]))
                assert isinstance(patch, list)
            except (ValueError, AssertionError):
                report.defect("webhook", None, f"{name}: patch is not a base64 JSON patch")


def webhook_phase(report: FuzzReport, port: int, healthy: Callable[[], bool]) -> None:
    """Malformed requests straight at the webhook on ``port``; after each, a valid review must be
    answered, and at the end ``healthy`` must hold."""
    good = _j(review())
    for name, method, headers, body, how in malformed_requests():
        path = "/other" if name == "other path" else "/mutate"
        started = time.monotonic()
        status, answer = _exchange(port, method, path, headers, body, how)
        report.webhook_seconds[name] = time.monotonic() - started
        report.webhook_requests += 1
        report.webhook_status[status] += 1
        _check_answer(report, name, status, answer, body)
        ok, answer = _exchange(port, "POST", "/mutate", {"Content-Type": "application/json"}, good, "send")
        if ok != 200:
            report.defect(
                "webhook", None, f"after {name}: a valid review answered HTTP {ok}: {answer[:200]!r}"
            )
    # Stalled clients: connections that never finish their body must not stop the webhook.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    stalled = []
    try:
        for _ in range(50):
            s = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10))
            s.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
            stalled.append(s)
        report.webhook_requests += 50
        started = time.monotonic()
        ok, answer = _exchange(port, "POST", "/mutate", {"Content-Type": "application/json"}, good, "send")
        if ok != 200 or time.monotonic() - started > 5:
            report.defect("webhook", None, f"with 50 stalled clients: a valid review answered HTTP {ok}")
    except OSError as err:
        report.defect("webhook", None, f"stalled clients: {err}")
    finally:
        for s in stalled:
            s.close()
    if not healthy():
        report.defect("webhook", None, "ksched is not healthy after the webhook requests")


# -- the command ----------------------------------------------------------------


def run_fuzz(
    specs: int, seed: int, live: int | None = None, state: local.ClusterState | None = None, *, cli: Cli
) -> FuzzReport:
    """Generate ``specs`` specs; create the first ``live`` (default all) through a local control
    plane (``state``, or one started here with KWOK nodes and torn down after), then feed every
    spec and the accepted pods to ``simulate`` through ``cli``, the command line's entry
    (:func:`ksched.commands.cli.main`, passed in because the command line runs this harness)."""
    if specs < 1:
        raise KschedError("--specs must be at least 1")
    started = time.monotonic()
    report = FuzzReport(seed, specs)
    generated = generate(specs, seed)
    workdir = Path(tempfile.mkdtemp(prefix="ksched-fuzz-"))
    live_specs = generated if live is None else generated[: max(0, live)]
    accepted: list[Obj] = []
    if live_specs:
        own = state is None
        if own:
            print(
                f"== local control plane: {FUZZ_NODES} fake nodes (builds it first if needed)",
                file=sys.stderr,
            )
            state = local.up(nodes=FUZZ_NODES, zones=3)
        assert state is not None
        try:
            print(
                f"== {len(live_specs)} specs through the API server, ksched and its webhook", file=sys.stderr
            )
            accepted = live_phase(report, state, live_specs, workdir)
        finally:
            if own:
                local.down()
    print(f"== {len(generated)} specs and {len(accepted)} accepted pods through simulate", file=sys.stderr)
    simulate_phase(report, generated, accepted, workdir, cli)
    report.seconds = time.monotonic() - started
    return report
