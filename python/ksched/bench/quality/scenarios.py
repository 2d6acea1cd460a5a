"""The quality benchmark's seeded scenarios: which pods arrive, how, and what they really use.

Owns each scenario's pods (requests, the scheduler each asks for, and the usage profile the
load simulation gives them, :mod:`ksched.cluster.load`), their arrival (all at once, at a
steady rate, or workload by workload over minutes), the node shapes it runs on, and, for the
scenarios whose pods are owned, the controllers that own them (:func:`controllers`: a
ReplicaSet per workload, which makes its pods from its template when the workload arrives, as
a Deployment's are made, and re-creates any that is evicted; and a PodDisruptionBudget on
every other workload). Promises: a scenario is a pure
function of its name, size, seed and the scheduler under test, so every scheduler sees the
same pods with the same usage; only the oracle's pods also carry what they will use
(:data:`EXPECTED_CPU`).

The scenarios:
- requests-lie: 500m pods, each using a heavy-tailed multiple of its request (0.2-3x).
- burst: half of requests-lie's pods at the rate, then one Deployment's rollout at once, each
  pod using 1.2 times its request.
- mixed-schedulers: requests-lie with every other pod placed by kube-scheduler.
- mixed-replicasets: workloads of three (500m, requests-lie's multiples, one per workload),
  every other pair of workloads placed by kube-scheduler; ReplicaSets own them, so either
  scheduler's pods can be moved, and each scheduler has PodDisruptionBudgets on half of its.
- best-effort: requests-lie's pods with no requests, using multiples of 500m.
- load-shift: workloads of three at half their request, a quarter of which step up to three
  times it two minutes in; ReplicaSets own them.
- diverse-deployments: Deployments (ReplicaSets) of 1-8 replicas arriving over three minutes,
  each at its own time, on nodes of eight shapes (2-16 cores, 2-8 GiB a core): requests of
  100m-2 cores (log-uniform) and 1-4 GiB a core, a usage multiple per workload drawn from a
  public trace's distribution (:mod:`.trace`), half of them ramping up over 30 s - 3 min.
- herd: a pool about half busy with workloads of three (500m, multiples from the trace), and
  one workload using twice its request whose ReplicaSet is then scaled at once by a quarter
  of the scenario's pods (its controller makes them).
- slow-start: workloads of three (500m, multiples from the trace) at the rate, each ramping
  to its usage over 30 s - 3 min, so that what a node reads at placement is far below what
  it will use.
- synchronized-bursts: workloads of three (500m, multiples from the trace) at the rate, half
  of which burst to twice their usage for the last minute of every two and a half, all at the
  same moments (the clock from the scenario's first create times the bursts, not the pods'
  start: :func:`time_bursts_from`), as services do under a shared peak: what a node reads
  between bursts is far below its peak.
- diverse-best-effort: diverse-deployments with a quarter of the workloads BestEffort: they
  request nothing, yet use their usage multiple of the CPU they would have asked for, beside
  workloads that do request, so that a learned figure for the one kind must not be read as
  the other's.
- mixed-schedulers-diverse, mixed-replicasets-diverse: diverse-deployments with every other
  workload (in order of arrival) placed by kube-scheduler; bare pods, which nothing may move,
  and the same owned by ReplicaSets.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from ksched.bench.quality.trace import trace_multiple
from ksched.cluster import load
from ksched.cluster.kwok import INSTANCE_TYPES, MIXED_INSTANCE_TYPES, Shapes
from ksched.cluster.load import UsageProfile, usage_annotations
from ksched.engine.quantity import parse_quantity
from ksched.objects import Obj

DEFAULT_SCHEDULER = "default-scheduler"
# The setups every other is measured against (:mod:`.gap`): kube-scheduler, and ksched told
# each pod's true usage at placement (:data:`EXPECTED_CPU`), the placements an estimate could
# at best make.
KUBE_SCHEDULER = "kube-scheduler"
ORACLE = "oracle"
# The oracle told each pod's steady usage but not its bursts (:func:`expected_cpu` with no
# horizon): what an estimate could reach without foreseeing a burst, measured to the oracle.
ORACLE_STEADY = "oracle-steady"
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
# The oracle's pods carry what they will really use (millicores), which ksched takes as their
# estimate: the profile's steady multiple of the request (of the reference CPU for a
# BestEffort pod), or its burst level where the pod bursts this soon after it starts.
EXPECTED_CPU = "ksched.io/expected-cpu"
ORACLE_HORIZON_S = 300
# The node shapes a scenario runs on: the local cluster's four, or eight from 2 to 16 cores.
SHAPES: dict[str, Shapes] = {"standard": INSTANCE_TYPES, "mixed": MIXED_INSTANCE_TYPES}
# diverse-deployments: a workload's CPU request (log-uniform), its memory per core, its
# replicas, when it arrives, and the share of workloads that ramp up.
REQUEST_CPU_RANGE_M = (100, 2000)
MEMORY_GIB_PER_CORE = (1, 2, 4)
MIN_MEMORY_MI = 128
MAX_REPLICAS = 8
ARRIVAL_SPAN_S = 180.0
RAMPING_SHARE = 0.5
# diverse-best-effort: the share of workloads that request nothing.
BEST_EFFORT_SHARE = 0.25
# Ramps (diverse-deployments' and slow-start's): usage climbs to its level over this long.
RAMP_RANGE_S = (30, 180)
# herd: the herd workload uses this multiple of its request (far from the trace's mean, 0.87),
# starts with WORKLOAD_REPLICAS replicas, and is scaled up by the scenario's pods over this.
HERD_MULTIPLE = 2.0
HERD_SHARE = 4
# synchronized-bursts: the share of workloads that burst; every BURST_EVERY_S seconds of the
# clock they use BURST_FACTOR times their steady multiple for the last BURST_FOR_S, together:
# 90-150 s and 240-300 s after the first create, within a 1,000-node run's five minutes.
BURSTING_SHARE = 0.5
BURST_EVERY_S = 150
BURST_FOR_S = 60
BURST_FACTOR = 2.0


@dataclass(frozen=True)
class Scenario:
    name: str
    pods: list[Obj]
    # Pods created per second; None: all at once.
    rate: float | None
    # The pods from this index on arrive all at once (a rollout burst), once the metric has
    # had time to show the ones before (the harness says how long); None: no burst.
    burst_from: int | None = None
    # A ReplicaSet per workload makes its pods when the workload arrives (:func:`controllers`).
    controlled: bool = False
    # Workloads arriving over minutes: each group of pods is created at once at its time (the
    # rate is not used), by its ReplicaSet where ``controlled``; None: at the rate.
    arrivals: tuple[Arrival, ...] | None = None
    # A herd: once the pods are placed and the metric has shown them, this workload's
    # ReplicaSet is scaled to this many replicas at once, and its controller makes the pods.
    scale_up: tuple[str, int] | None = None
    # The node shapes it runs on (a key of :data:`SHAPES`).
    shapes: str = "standard"


@dataclass(frozen=True)
class Arrival:
    """One workload's pods, ``pods[first : first + count]``, created at ``at_s`` seconds
    after the scenario's first create."""

    at_s: float
    first: int
    count: int


@dataclass(frozen=True)
class _Plan:
    """What a builder makes: the pods, and how the ones arriving over minutes or scaled up
    at once arrive."""

    pods: list[Obj]
    arrivals: tuple[Arrival, ...] | None = None
    scale_up: tuple[str, int] | None = None


def _heavy_tailed(rng: random.Random) -> float:
    """A usage multiple of the request, 0.2 to 3, log-normal (median 0.74, mean about 1): most
    pods use less than they ask, a few far more."""
    return min(3.0, max(0.2, rng.lognormvariate(-0.3, 0.8)))


def _pod(
    name: str,
    namespace: str,
    scheduler: str,
    profile: UsageProfile,
    requests: bool = True,
    cpu: str = REQUEST_CPU,
    memory: str = REQUEST_MEMORY,
) -> Obj:
    resources = {"requests": {"cpu": cpu, "memory": memory}} if requests else {}
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


def _mixed_replicasets(count: int, ns: str, scheduler: str, rng: random.Random) -> list[Obj]:
    pods: list[Obj] = []
    for w in range(-(-count // WORKLOAD_REPLICAS)):
        profile = UsageProfile(base=_heavy_tailed(rng), noise=NOISE, seed=w)
        # Workloads 2 and 3 of every four: :func:`controllers` budgets the even ones, so each
        # scheduler's workloads are half budgeted.
        asks = DEFAULT_SCHEDULER if w % 4 >= 2 else scheduler
        replicas = min(WORKLOAD_REPLICAS, count - w * WORKLOAD_REPLICAS)
        pods += [_pod(f"svc-{w}-{r}", ns, asks, profile) for r in range(replicas)]
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
    Created before its pods, a ReplicaSet makes them from its template, so a workload's pods
    differ only by their names."""
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


def _workloads(
    count: int,
    ns: str,
    scheduler: str,
    rng: random.Random,
    ramps: bool,
    first_seed: int = 0,
    bursting_share: float = 0.0,
) -> list[Obj]:
    """Workloads of :data:`WORKLOAD_REPLICAS` 500m pods, each sharing a usage multiple drawn
    from the trace, ramping up over :data:`RAMP_RANGE_S` where ``ramps``; ``bursting_share``
    of them burst together (:func:`_synchronized`)."""
    pods: list[Obj] = []
    for w in range(-(-count // WORKLOAD_REPLICAS)):
        multiple = trace_multiple(rng)
        ramp = rng.randint(*RAMP_RANGE_S) if ramps else 0
        # Drawn only where some burst, so the other scenarios' seeds keep their pods.
        bursts = bursting_share > 0 and rng.random() < bursting_share
        profile = _synchronized(multiple) if bursts else UsageProfile(base=multiple)
        profile = dataclasses.replace(profile, ramp_s=ramp, noise=NOISE, seed=first_seed + w)
        replicas = min(WORKLOAD_REPLICAS, count - w * WORKLOAD_REPLICAS)
        pods += [_pod(f"svc-{w}-{r}", ns, scheduler, profile) for r in range(replicas)]
    return pods


def _slow_start(count: int, ns: str, scheduler: str, rng: random.Random) -> _Plan:
    return _Plan(_workloads(count, ns, scheduler, rng, ramps=True))


def _synchronized(multiple: float) -> UsageProfile:
    """A profile at ``multiple`` that bursts to :data:`BURST_FACTOR` times it for the last
    :data:`BURST_FOR_S` of every :data:`BURST_EVERY_S` seconds of the clock, counted from the
    Unix second 0 until :func:`time_bursts_from` says when the run began."""
    return UsageProfile(
        base=multiple,
        burst_every_s=BURST_EVERY_S,
        burst_for_s=BURST_FOR_S,
        burst_to=round(multiple * BURST_FACTOR, 3),
        burst_epoch_s=0,
    )


def time_bursts_from(pods: list[Obj], unix_s: float) -> None:
    """Time the clock-timed bursts of ``pods`` (synchronized-bursts') from ``unix_s``, the
    scenario's first create, so that every run and every pool of a round sees its bursts at
    the same seconds of the scenario; called just before the pods are created."""
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        if load.BURST_EPOCH in annotations:
            annotations[load.BURST_EPOCH] = str(int(unix_s))


def _synchronized_bursts(count: int, ns: str, scheduler: str, rng: random.Random) -> _Plan:
    return _Plan(_workloads(count, ns, scheduler, rng, ramps=False, bursting_share=BURSTING_SHARE))


def _herd(count: int, ns: str, scheduler: str, rng: random.Random) -> _Plan:
    # The herd workload's first replicas arrive first, so the metric has long shown what they
    # use when it is scaled; then the background, about half the pool's CPU in requests and in
    # use (the trace's mean multiple is 0.87).
    herd = UsageProfile(base=HERD_MULTIPLE, noise=NOISE, seed=0)
    pods = [_pod(f"herd-{r}", ns, scheduler, herd) for r in range(WORKLOAD_REPLICAS)]
    pods += _workloads(count, ns, scheduler, rng, ramps=False, first_seed=1)
    return _Plan(pods, scale_up=("herd", WORKLOAD_REPLICAS + max(1, count // HERD_SHARE)))


def _deployment(w: int, ns: str, scheduler: str, rng: random.Random, replicas: int) -> list[Obj]:
    """diverse-deployments' workload ``w``: its requests, usage multiple and ramp, shared by
    its replicas."""
    low, high = REQUEST_CPU_RANGE_M
    cpu_m = round(math.exp(rng.uniform(math.log(low), math.log(high))) / 10) * 10
    memory_mi = max(MIN_MEMORY_MI, round(cpu_m * rng.choice(MEMORY_GIB_PER_CORE) * 1024 / 1000))
    ramp = rng.randint(*RAMP_RANGE_S) if rng.random() < RAMPING_SHARE else 0
    profile = UsageProfile(base=trace_multiple(rng), ramp_s=ramp, noise=NOISE, seed=w)
    return [
        _pod(f"dep-{w}-{r}", ns, scheduler, profile, cpu=f"{cpu_m}m", memory=f"{memory_mi}Mi")
        for r in range(replicas)
    ]


def _diverse(count: int, ns: str, scheduler: str, rng: random.Random) -> _Plan:
    workloads: list[tuple[float, list[Obj]]] = []
    made = 0
    while made < count:
        replicas = min(rng.randint(1, MAX_REPLICAS), count - made)
        at_s = round(rng.uniform(0.0, ARRIVAL_SPAN_S), 1)
        workloads.append((at_s, _deployment(len(workloads), ns, scheduler, rng, replicas)))
        made += replicas
    workloads.sort(key=lambda w: w[0])
    pods: list[Obj] = []
    arrivals = []
    for at_s, members in workloads:
        arrivals.append(Arrival(at_s, len(pods), len(members)))
        pods += members
    return _Plan(pods, arrivals=tuple(arrivals))


def _diverse_best_effort(count: int, ns: str, scheduler: str, rng: random.Random) -> _Plan:
    """diverse-deployments' kind of workloads (from this scenario's own rng, so not
    diverse-deployments' ones for the seed), :data:`BEST_EFFORT_SHARE` of them BestEffort, each
    using its multiple of the CPU (and memory) it would have requested."""
    plan = _diverse(count, ns, scheduler, rng)
    for a in plan.arrivals or ():
        if rng.random() < BEST_EFFORT_SHARE:
            for p in plan.pods[a.first : a.first + a.count]:
                resources = p["spec"]["containers"][0]["resources"]
                p["metadata"]["annotations"][load.REFERENCE_CPU] = resources["requests"]["cpu"]
                p["metadata"]["annotations"][load.REFERENCE_MEMORY] = resources["requests"]["memory"]
                p["spec"]["containers"][0]["resources"] = {}
    return plan


def _mixed_diverse(count: int, ns: str, scheduler: str, rng: random.Random) -> _Plan:
    """diverse-deployments with every other workload, in order of arrival, placed by
    kube-scheduler."""
    plan = _diverse(count, ns, scheduler, rng)
    for a in (plan.arrivals or ())[1::2]:
        for p in plan.pods[a.first : a.first + a.count]:
            p["spec"]["schedulerName"] = DEFAULT_SCHEDULER
    return plan


@dataclass(frozen=True)
class _Kind:
    build: Callable[[int, str, str, random.Random], _Plan]
    # Ends with a burst of its second half.
    burst: bool = False
    # Its pods are owned by ReplicaSets.
    controlled: bool = False
    shapes: str = "standard"


def _plain(build: Callable[[int, str, str, random.Random], list[Obj]]) -> Callable[..., _Plan]:
    return lambda count, ns, scheduler, rng: _Plan(build(count, ns, scheduler, rng))


_KINDS: dict[str, _Kind] = {
    "requests-lie": _Kind(_plain(_requests_lie)),
    "burst": _Kind(_plain(_burst), burst=True),
    "mixed-schedulers": _Kind(_plain(_mixed)),
    "mixed-replicasets": _Kind(_plain(_mixed_replicasets), controlled=True),
    "best-effort": _Kind(_plain(_best_effort)),
    "load-shift": _Kind(_plain(_load_shift), controlled=True),
    "diverse-deployments": _Kind(_diverse, controlled=True, shapes="mixed"),
    "herd": _Kind(_herd, controlled=True),
    "slow-start": _Kind(_slow_start, controlled=True),
    "synchronized-bursts": _Kind(_synchronized_bursts, controlled=True),
    "diverse-best-effort": _Kind(_diverse_best_effort, controlled=True, shapes="mixed"),
    "mixed-schedulers-diverse": _Kind(_mixed_diverse, shapes="mixed"),
    "mixed-replicasets-diverse": _Kind(_mixed_diverse, controlled=True, shapes="mixed"),
}
SCENARIOS = tuple(_KINDS)
# What `ksched bench --quality` runs unless told (the figures in docs/benchmarks.md are theirs).
DEFAULT_SCENARIOS = ("requests-lie", "burst", "mixed-schedulers", "best-effort", "load-shift")
# The scenarios whose pods controllers own: where pods can be moved.
CONTROLLED = tuple(name for name, kind in _KINDS.items() if kind.controlled)
# The scenarios that give part of every setup's pods to kube-scheduler.
MIXED = ("mixed-schedulers", "mixed-replicasets", "mixed-schedulers-diverse", "mixed-replicasets-diverse")


def shapes_of(name: str) -> str:
    """The node shapes the scenario runs on (a key of :data:`SHAPES`)."""
    return _KINDS[name].shapes


def scenario(
    name: str,
    pods: int,
    namespace: str,
    scheduler: str,
    seed: int,
    rate: float,
    oracle: bool = False,
    foresees: bool = True,
) -> Scenario:
    """The scenario's pods for one scheduler (``scheduler`` is the name its pods ask for);
    with ``oracle`` each pod also carries what it will use (:data:`EXPECTED_CPU`): its burst
    level where it bursts within :data:`ORACLE_HORIZON_S` and ``foresees``, else its steady
    usage."""
    kind = _KINDS[name]
    rng = random.Random(f"{name}/{seed}")
    plan = kind.build(pods, namespace, scheduler, rng)
    if oracle:
        for pod in plan.pods:
            horizon_s = ORACLE_HORIZON_S if foresees else 0
            pod["metadata"]["annotations"][EXPECTED_CPU] = f"{round(expected_cpu(pod, horizon_s) * 1000)}m"
    return Scenario(
        name,
        plan.pods,
        rate,
        pods // 2 if kind.burst else None,
        kind.controlled,
        plan.arrivals,
        plan.scale_up,
        kind.shapes,
    )


def expected_cpu(pod: Obj, horizon_s: float = ORACLE_HORIZON_S) -> float:
    """The cores the pod will use once steady, by its usage profile's annotations: the base
    multiple (or the burst level, where it bursts within ``horizon_s`` of its start) of each
    container's CPU request, or of the reference CPU where it requests none."""
    annotations = pod["metadata"]["annotations"]
    every = int(annotations.get(load.BURST_EVERY_SECONDS, "0"))
    lasting = int(annotations.get(load.BURST_FOR_SECONDS, "0"))
    bursts = every > 0 and lasting > 0 and every - lasting < horizon_s
    level = float(annotations[load.BURST_TO if bursts else load.BASE])
    reference = annotations.get(load.REFERENCE_CPU, load.BEST_EFFORT_CPU)
    return sum(
        level * float(parse_quantity(c.get("resources", {}).get("requests", {}).get("cpu", reference)))
        for c in pod["spec"]["containers"]
    )
