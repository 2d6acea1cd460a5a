"""The quality benchmark's seeded scenarios: which pods arrive, how, and what they really use.

Owns each scenario's pods (requests, the scheduler each asks for, and the usage profile the
load simulation gives them, :mod:`ksched.cluster.load`), their arrival (all at once or at a
steady rate) and, for load-shift, the controllers that own them (:func:`controllers`: a
ReplicaSet per workload, which adopts the pods the harness created and re-creates any that is
evicted, and a PodDisruptionBudget on every other workload). Promises: a scenario is a pure function of its name, size, seed and the scheduler
under test, so every scheduler sees the same pods with the same usage.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from ksched.cluster.load import UsageProfile, usage_annotations
from ksched.objects import Obj

DEFAULT_SCHEDULER = "default-scheduler"
REQUEST_CPU = "500m"
REQUEST_MEMORY = "512Mi"
# What a BestEffort pod's usage multiplies: it requests nothing, yet it uses a real share.
BEST_EFFORT_REFERENCE_CPU = "500m"
# load-shift: the pods whose usage grows do so this many seconds after they start.
SHIFT_AFTER_S = 120
# A burst's "period" long enough that it never repeats within a run: the burst is a step up.
NEVER_S = 10**7
# Noise on every profile: what a scrape sees moves, as real usage does.
NOISE = 0.1
# load-shift: pods come in workloads of this many replicas sharing one usage profile, so that a
# pod's replacement (made from its ReplicaSet's template) uses what the pod did.
WORKLOAD_REPLICAS = 3
# Every other load-shift workload has a PodDisruptionBudget that lets this many pods be down.
BUDGET_MAX_UNAVAILABLE = 1


@dataclass(frozen=True)
class Scenario:
    name: str
    pods: list[Obj]
    # Pods created per second; None: all at once.
    rate: float | None
    # The pods from this index on arrive all at once (a rollout burst), once the metric has
    # had time to show the ones before (the harness says how long); None: no burst.
    burst_from: int | None = None
    # Once its pods exist, a ReplicaSet per workload adopts them (:func:`controllers`).
    controlled: bool = False


def _heavy_tailed(rng: random.Random) -> float:
    """A usage multiple of the request, 0.2 to 3, log-normal (median 0.74, mean about 1): most
    pods use less than they ask, a few far more."""
    return min(3.0, max(0.2, rng.lognormvariate(-0.3, 0.8)))


def _pod(name: str, namespace: str, scheduler: str, profile: UsageProfile, requests: bool = True) -> Obj:
    resources = {"requests": {"cpu": REQUEST_CPU, "memory": REQUEST_MEMORY}} if requests else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": name.rsplit("-", 1)[0]},
            "annotations": usage_annotations(profile),
        },
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "app", "image": "app", "resources": resources}],
        },
    }


def _requests_lie(count: int, ns: str, scheduler: str, rng: random.Random) -> list[Obj]:
    return [
        _pod(f"app-{i}", ns, scheduler, UsageProfile(base=_heavy_tailed(rng), noise=NOISE, seed=i))
        for i in range(count)
    ]


def _burst(count: int, ns: str, scheduler: str, rng: random.Random) -> list[Obj]:
    # Half the pods arrive first, at the steady rate, and use what requests-lie's do: the
    # nodes' real load is uneven where their requests are not. Then one Deployment's rollout:
    # identical pods, all at once, that use 1.2 times what they request.
    background = count // 2
    return _requests_lie(background, ns, scheduler, rng) + [
        _pod(f"web-{i}", ns, scheduler, UsageProfile(base=1.2, noise=NOISE, seed=i))
        for i in range(count - background)
    ]


def _mixed(count: int, ns: str, scheduler: str, rng: random.Random) -> list[Obj]:
    pods = _requests_lie(count, ns, scheduler, rng)
    for p in pods[1::2]:
        p["spec"]["schedulerName"] = DEFAULT_SCHEDULER
    return pods


def _best_effort(count: int, ns: str, scheduler: str, rng: random.Random) -> list[Obj]:
    return [
        _pod(
            f"be-{i}",
            ns,
            scheduler,
            UsageProfile(
                base=_heavy_tailed(rng), noise=NOISE, seed=i, reference_cpu=BEST_EFFORT_REFERENCE_CPU
            ),
            requests=False,
        )
        for i in range(count)
    ]


def _load_shift(count: int, ns: str, scheduler: str, rng: random.Random) -> list[Obj]:
    pods = []
    for w in range(-(-count // WORKLOAD_REPLICAS)):
        grows = rng.random() < 0.25
        # A quarter of the workloads step from half their request to three times it, minutes in.
        profile = UsageProfile(
            base=0.5,
            burst_every_s=NEVER_S if grows else 0,
            burst_for_s=NEVER_S - SHIFT_AFTER_S if grows else 0,
            burst_to=3.0,
            noise=NOISE,
            seed=w,
        )
        replicas = min(WORKLOAD_REPLICAS, count - w * WORKLOAD_REPLICAS)
        pods += [_pod(f"svc-{w}-{r}", ns, scheduler, profile) for r in range(replicas)]
    return pods


def controllers(pods: list[Obj]) -> list[Obj]:
    """A ReplicaSet per workload (the pods' ``app`` label), whose template is its first pod
    and whose replicas are its pods, and a PodDisruptionBudget on every other workload.
    Created after the pods, a ReplicaSet adopts them instead of making its own."""
    workloads: dict[str, list[Obj]] = {}
    for p in pods:
        workloads.setdefault(p["metadata"]["labels"]["app"], []).append(p)
    out: list[Obj] = []
    for i, (app, members) in enumerate(workloads.items()):
        first = members[0]["metadata"]
        selector = {"matchLabels": {"app": app}}
        meta = {"name": app, "namespace": first["namespace"]}
        template = {"labels": first["labels"], "annotations": first["annotations"]}
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": meta,
                "spec": {
                    "replicas": len(members),
                    "selector": selector,
                    "template": {"metadata": template, "spec": members[0]["spec"]},
                },
            }
        )
        if i % 2 == 0:
            out.append(
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": meta,
                    "spec": {"maxUnavailable": BUDGET_MAX_UNAVAILABLE, "selector": selector},
                }
            )
    return out


_BUILDERS: dict[str, tuple[Callable[[int, str, str, random.Random], list[Obj]], bool, bool]] = {
    # name: (builder, ends with a burst of its second half, owned by ReplicaSets)
    "requests-lie": (_requests_lie, False, False),
    "burst": (_burst, True, False),
    "mixed-schedulers": (_mixed, False, False),
    "best-effort": (_best_effort, False, False),
    "load-shift": (_load_shift, False, True),
}
SCENARIOS = tuple(_BUILDERS)
# The scenarios whose pods controllers own: where pods can be moved.
CONTROLLED = tuple(name for name, (_, _, controlled) in _BUILDERS.items() if controlled)


def scenario(name: str, pods: int, namespace: str, scheduler: str, seed: int, rate: float) -> Scenario:
    """The scenario's pods for one scheduler (``scheduler`` is the name its pods ask for)."""
    build, burst, controlled = _BUILDERS[name]
    rng = random.Random(f"{name}/{seed}")
    return Scenario(
        name, build(pods, namespace, scheduler, rng), rate, pods // 2 if burst else None, controlled
    )
