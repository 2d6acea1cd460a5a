"""``ksched bench``'s options: one function per mode's argument group.

The options without a group are the engine's (the in-process throughput, no mode flag);
some (``--nodes``, ``--pods``, ``--seed``, ``--rate``, ``--schedulers``, ``--out``) serve
several modes, and their help says each mode's default, which :mod:`ksched.commands.bench`
fills in once it knows the mode. The order the functions are called in is the order
``ksched bench --help`` lists the groups and its usage line the options.
"""

from __future__ import annotations

import argparse

# ``--workload``: the load model's cost a cycle (:mod:`ksched.bench.load_model`).
LOAD_MODEL = "load-model"
# ``--workload``: a herd's batch onto nodes all over a threshold (:mod:`ksched.bench.saturation`).
SATURATED_HERD = "saturated-herd"


def add_options(parser: argparse.ArgumentParser) -> None:
    """Every mode's options, in the order ``--help`` shows them."""
    _engine_options(parser)
    side_by_side = _side_by_side_options(parser)
    _existing_pods_options(parser)
    # Listed in the side by side's group, but added after the existing-pods options: the usage
    # line shows it there.
    _out_option(side_by_side)
    _quality_options(parser)
    _chaos_options(parser)
    _fuzz_options(parser)
    _hostile_options(parser)


def _engine_options(parser: argparse.ArgumentParser) -> None:
    """The in-process throughput (no mode flag), and the options the modes share."""
    parser.add_argument(
        "--nodes", type=int, help="nodes (default 5000; with --chaos 2000; with --quality 1000)"
    )
    parser.add_argument(
        "--pods",
        type=int,
        default=None,
        help="pending pods (default 10000; with --cluster: backlog pods per workload, default --nodes; "
        "with --existing-pods: the backlog drained, default 5000; with --quality: pods per scenario, "
        "default 6 per node)",
    )
    parser.add_argument("--existing", type=int, default=0, help="pods already bound (default 0)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--batch-size", type=int, default=None, help="pods a cycle (default 512; --workload load-model: 10)"
    )
    parser.add_argument(
        "--no-reference", action="store_true", help="skip the pure-Python reference comparison"
    )
    parser.add_argument("--json", action="store_true", help="print figures as JSON (key pods_per_s)")
    parser.add_argument(
        "--workload",
        choices=(
            "mixed",
            "anti-affinity",
            "preferred-affinity",
            "spread",
            "preferred-spread",
            "preemption",
            LOAD_MODEL,
            SATURATED_HERD,
        ),
        default="mixed",
        help="mixed (default): node-level constraints and metrics; load-model: what building the "
        "learned estimate's values costs a cycle (--nodes, default 1000; --batch-size binds a cycle, "
        "default 10); saturated-herd: a herd's batch onto nodes all over onSaturation: leastLoaded's "
        "threshold, its engine runs and time (--nodes, default 800; --pods, default 300; --mixed-requests); "
        "the others mirror kube-scheduler's scheduler_perf cases (required "
        "anti-affinity, preferred affinity, topology spread, preferred topology spread, PreemptionBasic)",
    )
    parser.add_argument(
        "--mixed-requests",
        action="store_true",
        help="--workload saturated-herd: replicas of 250m, 500m and 1 core in turn (default all 500m)",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="pod-level and preemption workloads: multiply their pod counts (default 1)",
    )


def _side_by_side_options(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """``--cluster``: ksched beside kube-scheduler and a null binder on a local control plane;
    returns the group, which ``--out`` joins last."""
    group = parser.add_argument_group("side by side on a local control plane (--cluster)")
    group.add_argument(
        "--cluster", action="store_true", help="run the side-by-side benchmark on a local control plane"
    )
    group.add_argument(
        "--workloads",
        default="bare,replicaset,anti-affinity,spread,metrics",
        help="comma-separated, from bare, replicaset, anti-affinity, spread, metrics (default: those) "
        "and fill (the cluster filled to 95%% of its cpu in steps: sharded replicas' conflicts by fill)",
    )
    group.add_argument(
        "--schedulers",
        help="comma-separated, from null-binder, kube-scheduler, ksched (default: all three); with "
        "--quality from kube-scheduler, ksched, ksched-no-metrics (default: these three) and oracle (ksched "
        "with its configuration, told each pod's true usage by the annotation ksched.io/expected-cpu), oracle-steady "
        "(the oracle told each pod's steady usage, not its bursts: what placing without foreseeing a burst "
        "reaches), and with --pools "
        "oracle-measured (ksched told each pod's steady usage one scrape interval after its bind: what "
        "placing each pod blind reaches with a perfect estimate of those placed before it), "
        "kube-scheduler+descheduler (the descheduler's LowNodeUtilization on actual usage) and "
        "ksched-rebalance (ksched with its rebalancer), which load-shift also judges by their evictions, "
        "ksched-steer (steering on, its pool only), ksched-steer-rebalance (and the rebalancer moving "
        "default-scheduler's pods of its namespace), oracle-steer (ksched-steer told every pod's true usage, "
        "kube-scheduler's too: what steering reaches with a perfect estimate) and shadow (kube-scheduler's pool watched by a shadow "
        "ksched, whose estimate of the hot node-minutes avoided is checked against ksched's pool)",
    )
    group.add_argument(
        "--ksched",
        action="append",
        default=[],
        metavar="LABEL=COMMAND",
        help=(
            "also run another ksched command (say an older build's venv/bin/ksched) under LABEL; "
            "with --quality it runs ksched's configuration, and LABEL names its namespaces "
            "(lowercase letters, digits and '-'); repeatable"
        ),
    )
    group.add_argument(
        "--replicas",
        default="1",
        metavar="N[,N...]",
        help="run each ksched as N replicas with sharding on, every one binding onto the nodes it owns, "
        "labelled LABEL-xN (1: one process, no leader election); comma-separated counts run one after "
        "the other (default 1); with --chaos, one count: N above 1 soaks N sharded replicas instead of "
        "two leader-elected ones, killing and freezing any of them",
    )
    group.add_argument(
        "--rate",
        type=float,
        help="steady phase: pods created per second (default 50; with --chaos: arrivals, default 10)",
    )
    group.add_argument(
        "--steady-pods",
        type=int,
        default=1000,
        help="steady phase: pods per workload (default 1000; 0 skips it)",
    )
    group.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run each workload this many times per scheduler, every other round in reverse order; "
        "the summary gives the medians, and p50/p99 of every round's steady pods together (default 1)",
    )
    group.add_argument(
        "--node-lease-seconds",
        type=int,
        default=86400,
        help="KWOK's node Lease duration, renewed every quarter of it (default a day: a kubelet's 40 s "
        "renews 5,000 nodes' Leases 500 times a second, most of a 2-core machine, in every scheduler's drain)",
    )
    group.add_argument(
        "--stall", type=float, default=60.0, help="give up on a phase after this many seconds without a bind"
    )
    group.add_argument(
        "--cpu-hog",
        type=int,
        default=0,
        metavar="CORES",
        help="a busy control plane: this many processes spin at 100%% of a core each while the schedulers "
        "are measured, stopped when the bench ends (default 0)",
    )
    return group


def _existing_pods_options(parser: argparse.ArgumentParser) -> None:
    """``--cluster --existing-pods N``: the side by side on a cluster already running pods."""
    group = parser.add_argument_group("on a cluster already running pods (--cluster --existing-pods N)")
    group.add_argument(
        "--existing-pods",
        type=int,
        default=0,
        metavar="N",
        help="fill the cluster with N bound pods first (a DaemonSet pod per node, Deployments behind "
        "Services, zone spread and anti-affinity, at most 110 on a node), then per scheduler: (a) start-up "
        "to ready and peak RSS, (d) a forced relist (etcd compacted, API server restarted), (b) a drain of "
        "--pods (default 5000), (c) a rolling update of --churn-pods at --churn-rate, (e) --steady-pods at "
        "--rate: RSS and CPU per pod; exit 1 if a pod is lost or unbound or a node over-committed",
    )
    group.add_argument(
        "--churn-pods",
        type=int,
        default=10000,
        help="--existing-pods: pods the rolling update replaces (default 10000)",
    )
    group.add_argument(
        "--churn-rate",
        type=float,
        default=100.0,
        help="--existing-pods: pods deleted and created per second by the rolling update (default 100)",
    )


def _out_option(side_by_side: argparse._ArgumentGroup) -> None:
    """``--out``: where the side by side and ``--quality`` write their results."""
    side_by_side.add_argument(
        "--out",
        help="directory for results.json, table.md, the PNG and logs "
        "(default ksched-bench-cluster; with --quality ksched-bench-quality)",
    )


def _quality_options(parser: argparse.ArgumentParser) -> None:
    """``--quality``: placement quality under real load."""
    group = parser.add_argument_group("placement quality under real load (--quality)")
    group.add_argument(
        "--quality",
        action="store_true",
        help="a local control plane with the load simulation (KWOK usage, Prometheus): kube-scheduler, "
        "ksched with a load-aware configuration and ksched without metrics place the same seeded "
        "scenarios in turn; prints hotspot node-minutes, p95 utilisation, its spread, pods on hot "
        "nodes, pending pods and pods/s; --out gets results.json, table.md, utilisation.png",
    )
    group.add_argument(
        "--scenarios",
        default="requests-lie,burst,mixed-schedulers,best-effort,load-shift",
        help="comma-separated (default: requests-lie, burst, mixed-schedulers, best-effort, load-shift); also diverse-deployments (varied requests, trace-drawn "
        "usage per workload, ramps, Deployments arriving over minutes, nodes of 2-16 cores), herd (one "
        "ReplicaSet scaled at once at twice its request onto a half-busy pool), slow-start (usage "
        "ramping over 30 s - 3 min), synchronized-bursts (half the workloads at twice their usage for "
        "the last minute of every two and a half, all at once) and mixed-replicasets (mixed-schedulers' usage in ReplicaSet-owned "
        "workloads, half of them kube-scheduler's, judged by their evictions too with --pools); "
        "diverse-best-effort is diverse-deployments with a quarter of the workloads BestEffort (no "
        "requests, yet using CPU); mixed-schedulers-diverse and mixed-replicasets-diverse are "
        "diverse-deployments with every other workload kube-scheduler's, as bare pods and owned by "
        "ReplicaSets",
    )
    group.add_argument(
        "--observe",
        type=float,
        default=180.0,
        help="seconds from the first create that are judged (default 180)",
    )
    group.add_argument(
        "--scrape-interval",
        type=float,
        default=15.0,
        help="Prometheus's scrape interval, seconds (default 15)",
    )
    group.add_argument(
        "--threshold", type=float, default=0.8, help="CPU utilisation over which a node is hot (default 0.8)"
    )
    group.add_argument(
        "--ksched-config",
        help="ksched's load-aware configuration (default: examples/load-aware.yaml, shipped with ksched)",
    )
    group.add_argument(
        "--rebalance-config",
        help="ksched-rebalance's configuration, whose rebalance lines and interval the descheduler gets too "
        "(default: examples/rebalance.yaml, shipped with ksched)",
    )
    group.add_argument(
        "--quality-config",
        action="append",
        default=[],
        metavar="LABEL=FILE",
        help=(
            "also run ksched with this configuration under LABEL (say today's beside a candidate's; "
            "LABEL names its namespaces: lowercase letters, digits and '-'); repeatable"
        ),
    )
    group.add_argument(
        "--pools",
        action="store_true",
        help="run each scenario's schedulers at once, each on an equal pool of the nodes (same shapes, "
        "same scrapes, same machine load; one observation window a scenario instead of one each)",
    )
    group.add_argument(
        "--shapes",
        choices=("standard", "mixed"),
        help="run every scenario on these node shapes: standard (4 and 8 cores) or mixed (eight "
        "shapes of 2-16 cores and 2-8 GiB a core); default: each scenario's own (diverse-deployments "
        "and its mixed-schedulers forms on mixed, the others on standard)",
    )


def _chaos_options(parser: argparse.ArgumentParser) -> None:
    """``--chaos``: the soak of two leader-elected replicas under faults."""
    group = parser.add_argument_group("chaos soak (--chaos)")
    group.add_argument(
        "--chaos",
        action="store_true",
        help="a soak of two leader-elected ksched replicas on a local control plane of its own "
        "under seeded, overlapping faults; checks the invariants at the end (exit 1 if one fails)",
    )
    group.add_argument("--minutes", type=float, default=10.0, help="how long pods arrive (default 10)")


def _fuzz_options(parser: argparse.ArgumentParser) -> None:
    """``--fuzz``: odd pods, nodes, metrics, configurations and connections."""
    group = parser.add_argument_group("fuzzer (--fuzz)")
    group.add_argument(
        "--fuzz",
        action="store_true",
        help="odd input of five kinds, from --seed: pod specs through a local control plane (API server, "
        "ksched run, its webhook) and simulate, and malformed AdmissionReviews; odd nodes through "
        "simulate and the API server; crafted Prometheus answers and metric files; mutated "
        "configurations; slow, silent and flooding clients at the HTTP server and webhook. "
        "Exit 1 on any defect",
    )
    group.add_argument(
        "--fuzz-kinds",
        default="",
        metavar="KINDS",
        help="with --fuzz: which of pods,nodes,metrics,configs,connections to run (default all), "
        "sharing --specs (pods 60%%, nodes 15%%, configs 14.8%%, metrics 10%%, connections 0.2%%: "
        "one attack each); KIND=N gives a kind its own count, e.g. configs=500,connections=13",
    )
    group.add_argument(
        "--specs", type=int, default=10000, help="cases generated, shared over --fuzz-kinds (default 10000)"
    )
    group.add_argument(
        "--live",
        type=int,
        help="how many pod specs go through the API server (default all; 0: no control plane)",
    )


def _hostile_options(parser: argparse.ArgumentParser) -> None:
    """``--hostile``: ksched live with and without bad inputs."""
    group = parser.add_argument_group("bad inputs, live (--hostile)")
    group.add_argument(
        "--hostile",
        action="store_true",
        help="ksched run with its webhook on a local control plane, timed on the bare workload "
        "(--pods in a backlog, --routed through the webhook) without and then with a 10Ei node, a node "
        "priced inf, and --clients idle TCP clients on the webhook and half-sent requests on the HTTP "
        "server; exit 1 if a pod is lost or unbound, a node over-committed, or ksched logs a traceback",
    )
    group.add_argument(
        "--clients", type=int, default=100, help="idle and half-sent clients each, held (default 100)"
    )
    group.add_argument(
        "--routed", type=int, default=300, help="pods created one by one through the webhook (default 300)"
    )
