"""``ksched cluster up|down|env``: the arguments of the local control plane, handed to :mod:`ksched.cluster.local`.

``env`` prints one ``export`` line for ``eval $(ksched cluster env)``: ``KUBECONFIG``, and
``PROM`` (the local Prometheus's URL) when the cluster runs one, as the docs use them. It
reads the state ``up`` recorded (:mod:`ksched.cluster.processes`) and starts nothing.
"""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING

from ksched.commands.exit_codes import EXIT_OK

if TYPE_CHECKING:
    from ksched.cluster.processes import ClusterState


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = sub.add_parser(
        "cluster",
        help="a local real control plane (etcd, kube-apiserver, KWOK, kube-scheduler)",
        description="Example: ksched cluster up --nodes 100 --with-scheduler; eval $(ksched cluster env)",
    )
    csub = c.add_subparsers(dest="cluster_command", required=True)
    up = csub.add_parser("up", help="build (if needed) and start the control plane with fake nodes")
    up.add_argument("--nodes", type=int, default=10)
    up.add_argument("--zones", type=int, default=3)
    up.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        metavar="N",
        help="also N real nodes (kubelet, containerd, runc, a CNI bridge each; one kube-proxy), which "
        "run real containers: needs root; Debian's containerd, runc and CNI plugins are installed "
        "with apt-get when missing. See docs/install.md",
    )
    up.add_argument("--with-scheduler", action="store_true", help="also run the real kube-scheduler")
    up.add_argument(
        "--with-controllers",
        action="store_true",
        help="also run kube-controller-manager's workload controllers (Deployments, ReplicaSets, GC, PDBs)",
    )
    up.add_argument(
        "--with-prometheus",
        metavar="TARGETS",
        help="also run Prometheus scraping these host:port targets (comma-separated)",
    )
    up.add_argument(
        "--load-simulation",
        action="store_true",
        help="pods use what their load.ksched.io/ usage profile says (KWOK); Prometheus scrapes every "
        "node's resource metrics and records node:node_cpu_utilisation:ratio; metrics-server serves "
        "metrics.k8s.io (kubectl top nodes). See docs/load-simulation.md",
    )
    up.add_argument(
        "--scrape-interval",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="with --load-simulation: how often Prometheus scrapes each node (default 15)",
    )
    up.add_argument(
        "--node-lease-seconds",
        type=int,
        default=40,
        help="the fake nodes' Lease duration, renewed every quarter of it (default 40, a kubelet's)",
    )
    up.add_argument(
        "--scheduler-qps", type=float, default=5000.0, help="kube-scheduler client QPS (burst is twice this)"
    )
    up.add_argument(
        "--percentage-of-nodes-to-score",
        type=int,
        default=0,
        help="kube-scheduler percentageOfNodesToScore (0 = adaptive)",
    )
    csub.add_parser("down", help="stop exactly the processes `up` started and remove its state")
    csub.add_parser("env", help="print `export KUBECONFIG=...` for the running cluster")
    c.set_defaults(func=_cluster)


def _cluster(args: argparse.Namespace) -> int:
    from ksched.cluster import load, local
    from ksched.cluster.processes import ClusterError, load_state

    if args.cluster_command == "up":
        simulation = (
            load.LoadSimulation(scrape_interval_s=args.scrape_interval) if args.load_simulation else None
        )
        env = local.up(
            nodes=args.nodes,
            zones=args.zones,
            with_scheduler=args.with_scheduler,
            with_controllers=args.with_controllers,
            prometheus_targets=args.with_prometheus,
            scheduler_qps=args.scheduler_qps,
            percentage_of_nodes_to_score=args.percentage_of_nodes_to_score,
            node_lease_s=args.node_lease_seconds,
            load_simulation=simulation,
            real_nodes=args.real_nodes,
        )
        print(env.describe())
    elif args.cluster_command == "down":
        print(local.down())
    elif args.cluster_command == "env":
        state = load_state()
        if state is None:
            raise ClusterError("no local cluster is running; start one with `ksched cluster up`")
        print(env_exports(state))
    return EXIT_OK


def env_exports(state: ClusterState) -> str:
    """One ``export`` line, so that ``eval $(ksched cluster env)`` works quoted or not:
    ``KUBECONFIG``, and ``PROM`` (the local Prometheus's URL) when ``up`` started Prometheus
    (``--with-prometheus`` or ``--load-simulation``)."""
    exports = {"KUBECONFIG": state.kubeconfig}
    if state.prometheus:
        exports["PROM"] = state.prometheus
    return "export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in exports.items())
