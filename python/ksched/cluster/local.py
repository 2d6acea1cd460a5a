"""``ksched cluster up|down|env``: a real control plane on loopback.

Owns starting, in order, etcd and kube-apiserver (RBAC, token-file admin, service-account
keys, relaxed in-flight limits; :mod:`~ksched.cluster.controlplane`), the KWOK controller
with N fake nodes (:mod:`~ksched.cluster.kwok`), and optionally the real kube-scheduler, the
workload controllers, Prometheus (:mod:`~ksched.cluster.prometheus`), the load simulation
(:mod:`~ksched.cluster.load`, :mod:`~ksched.cluster.metrics_server`) and real nodes
(:mod:`~ksched.cluster.realnode`), each on a free port; and stopping, restarting or
signalling exactly those processes (by recorded pid). State lives under ``~/.cache/ksched/cluster`` (or ``$KSCHED_CLUSTER_DIR``;
:mod:`~ksched.cluster.processes`). A second ``up`` while one runs is refused; state left by a
crashed run is detected and cleaned.
Callers reach all of it through this module (``__all__``).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from ksched.cluster import counters, load, metrics_server, realnode
from ksched.cluster.build import Pins, ensure_built
from ksched.cluster.controlplane import (
    audit_log_path,
    install_podgroup_crd,
    kube_scheduler_args,
    start_apiserver,
    start_controller_manager,
    start_etcd,
    start_kube_scheduler,
    write_credentials,
    write_kubeconfig,
)
from ksched.cluster.kwok import (
    FAKE_NODE_ANNOTATION,
    INSTANCE_TYPES,
    NODE_LEASE_S,
    REGION,
    Shapes,
    fake_nodes,
    start_nodes,
)
from ksched.cluster.processes import (
    READY_TIMEOUT_S,
    ClusterError,
    ClusterState,
    Launcher,
    alive,
    free_port,
    http_ok,
    listening,
    load_state,
    save_state,
    state_dir,
    tail,
    threads_left,
)
from ksched.cluster.prometheus import start_prometheus

__all__ = [
    "FAKE_NODE_ANNOTATION",
    "REGION",
    "ClusterError",
    "ClusterState",
    "audit_log_path",
    "down",
    "env_line",
    "etcd_compact",
    "fake_nodes",
    "free_port",
    "http_ok",
    "kube_scheduler_args",
    "load_image",
    "real_nodes",
    "restart",
    "signal_component",
    "stop",
    "up",
]

STOP_TIMEOUT_S = 10.0


def up(
    nodes: int = 10,
    zones: int = 3,
    with_scheduler: bool = False,
    with_controllers: bool = False,
    extra_controllers: tuple[str, ...] = (),
    prometheus_targets: str | None = None,
    scheduler_qps: float = 5000.0,
    percentage_of_nodes_to_score: int = 0,
    audit_policy: dict[str, Any] | None = None,
    node_lease_s: int = NODE_LEASE_S,
    load_simulation: load.LoadSimulation | None = None,
    real_nodes: int = 0,
    shapes: Shapes = INSTANCE_TYPES,
) -> ClusterState:
    """Build what is missing, start the control plane and wait until every node is Ready.

    ``extra_controllers`` are kube-controller-manager controllers to run beside the workload
    controllers (``with_controllers``), e.g. ``taint-eviction-controller``.
    With ``audit_policy`` (an audit.k8s.io/v1 Policy) kube-apiserver writes the
    requests it selects to ``audit.log`` in the state directory, one JSON event a line.
    KWOK renews each node's Lease every quarter of ``node_lease_s``, as a kubelet does
    (kube-controller-manager's node lifecycle controller, where it runs, reads them).
    With ``load_simulation`` pods use what their usage profiles say, Prometheus records
    every node's utilisation and metrics-server serves ``metrics.k8s.io``
    (:mod:`~ksched.cluster.load`). Prometheus runs when ``prometheus_targets`` is given (an
    empty string: no targets of the caller's) or with the load simulation; it also scrapes the
    real nodes' kubelets (job ``kubelet``). The KWOK nodes take ``shapes`` (instance type,
    cpu, memory) in turn.
    With ``real_nodes`` that many real kubelets join beside the KWOK nodes
    (:mod:`~ksched.cluster.realnode`): the API server then listens on the first node's bridge,
    admits pods with their ServiceAccount, and kube-controller-manager runs the controllers
    real pods need (ServiceAccounts, the root CA, EndpointSlices) beside the workload ones."""
    if node_lease_s < 1:
        raise ClusterError(f"the node Lease duration must be at least 1 s, not {node_lease_s}")
    existing = load_state()
    if existing is not None:
        if any(alive(pid, name) for name, pid in existing.pids.items()):
            raise ClusterError(
                f"a local cluster is already running (kubeconfig {existing.kubeconfig}); stop it with `ksched cluster down`"
            )
        shutil.rmtree(existing.directory, ignore_errors=True)
    if real_nodes:
        realnode.check_host()
    bin_dir = ensure_built(Pins(), with_helm=False, with_metrics_server=load_simulation is not None)
    directory = state_dir()
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    ports = {"etcd": free_port(), "etcd-peer": free_port(), "apiserver": free_port()}
    token = secrets.token_hex(16)
    reals = realnode.plan(real_nodes, directory) if real_nodes else []
    address = realnode.api_address(reals) if reals else "127.0.0.1"
    state = ClusterState(
        str(directory),
        str(directory / "kubeconfig"),
        f"https://{address}:{ports['apiserver']}",
        token,
        unprivileged_token=secrets.token_hex(16),
        ports=ports,
    )
    save_state(state)
    launcher = Launcher(directory, bin_dir, state)
    try:
        if reals:
            # Recorded before any change, so that `down` undoes a half-made host too.
            state.real_nodes = realnode.to_state(reals, realnode.host_before())
            save_state(state)
            realnode.prepare_host(reals)
        _start(
            launcher,
            state,
            bin_dir,
            directory,
            nodes,
            zones,
            with_scheduler,
            with_controllers,
            extra_controllers,
            prometheus_targets,
            scheduler_qps,
            percentage_of_nodes_to_score,
            audit_policy,
            node_lease_s,
            load_simulation,
            reals,
            shapes,
        )
    except BaseException:
        down()
        raise
    return state


def _start(
    launcher: Launcher,
    state: ClusterState,
    bin_dir: Path,
    directory: Path,
    nodes: int,
    zones: int,
    with_scheduler: bool,
    with_controllers: bool,
    extra_controllers: tuple[str, ...],
    prometheus_targets: str | None,
    scheduler_qps: float,
    percentage: int,
    audit_policy: dict[str, Any] | None,
    node_lease_s: int,
    simulation: load.LoadSimulation | None,
    reals: list[realnode.RealNode],
    shapes: Shapes = INSTANCE_TYPES,
) -> None:
    """Start each component in order, each waited for until it answers."""
    sa_key = write_credentials(launcher)
    start_etcd(launcher)
    certs = metrics_server.make_certificates(directory / "aggregation") if simulation else None
    start_apiserver(launcher, sa_key, audit_policy, certs, with_real_nodes=bool(reals))
    write_kubeconfig(launcher)
    install_podgroup_crd(launcher)
    start_nodes(launcher, nodes, zones, node_lease_s, simulate_load=simulation is not None, shapes=shapes)
    if simulation:
        counters.start(launcher)
    if with_scheduler:
        start_kube_scheduler(launcher, scheduler_qps, percentage)
    if with_controllers or reals:
        start_controller_manager(launcher, extra_controllers, with_real_nodes=bool(reals))
    if prometheus_targets is not None or simulation:
        # The real nodes are scraped from the start: their kubelets answer once they run.
        start_prometheus(
            launcher, prometheus_targets or "", simulation, realnode.scrape_configs(reals) if reals else None
        )
    if simulation and certs:
        metrics_server.start_metrics_server(launcher, certs, simulation)
    if reals:
        realnode.start(launcher, reals, state, bin_dir, zones)
    save_state(state)


# `restart` and `down` one at a time in this process: a restart that a fault thread began
# would otherwise start its component again after `down` had read the state, and that
# process would outlive the cluster, serving a removed directory.
_CONTROL = threading.Lock()


def down() -> str:
    """Stop exactly the processes ``up`` recorded and remove the state directory.

    Waits for a :func:`restart` in progress in this process, so what it starts is stopped too."""
    with _CONTROL:
        return _down()


def _down() -> str:
    state = load_state()
    if state is None:
        shutil.rmtree(state_dir(), ignore_errors=True)
        return "no local cluster is running"
    stopped = []
    for name, pid in reversed(list(state.pids.items())):
        # Components are recorded under their executable's name (a real node's under a link
        # named after it), so the name identifies the process.
        if _stop(name, pid):
            stopped.append(name)
    left: list[str] = []
    if state.real_nodes:
        reals, changes = realnode.from_state(state.real_nodes)
        left = realnode.teardown(reals, changes, state.directory)
    shutil.rmtree(state.directory, ignore_errors=True)
    done = f"stopped {', '.join(stopped) or 'nothing (already exited)'}; removed {state.directory}"
    if left:
        raise ClusterError(f"{done}, but could not remove: {', '.join(left)}")
    return done


def _stop(name: str, pid: int) -> bool:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT_S, and wait until no thread of it is left (its
    ports are free again then); False if it was not running."""
    if not alive(pid, name):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while (alive(pid, name) or threads_left(pid)) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.1)
    if alive(pid, name) or threads_left(pid):
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while threads_left(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.1)
    _reap(pid)
    return True


def _running(component: str) -> ClusterState:
    state = load_state()
    if state is None or component not in state.commands:
        raise ClusterError(f"no running local cluster with a {component!r} component")
    return state


def stop(component: str) -> None:
    """Stop one component (SIGTERM, then SIGKILL); :func:`restart` starts it again."""
    state = _running(component)
    _stop(component, state.pids[component])


def signal_component(component: str, signum: int) -> None:
    """Send a signal to one running component (SIGSTOP / SIGCONT to hang and resume it)."""
    state = _running(component)
    if alive(state.pids[component], component):
        os.kill(state.pids[component], signum)


def etcd_compact() -> int:
    """Compact etcd up to its current revision, so that watches resumed from an older
    resourceVersion are answered ``410 Gone``. Returns the revision."""
    import urllib.request

    state = _running("etcd")
    base = f"http://127.0.0.1:{state.ports['etcd']}/v3/kv"

    def post(path: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(
            f"{base}/{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    # A range over one (absent) key answers with the store's current revision.
    revision = int(post("range", {"key": "AA=="})["header"]["revision"])
    post("compaction", {"revision": revision, "physical": True})
    return revision


def restart(component: str, down_s: float = 0.0) -> None:
    """Stop one component and start it again with the same command line (for failure tests),
    after ``down_s`` seconds stopped.

    kube-apiserver is waited for until /readyz answers again, etcd until /health does and
    kube-apiserver's /readyz (its etcd check) again, KWOK until its server listens.
    Raises :class:`ClusterError` if the cluster was taken down meanwhile (see ``_CONTROL``)."""
    with _CONTROL:
        state = _running(component)
        _stop(component, state.pids[component])
        if down_s > 0:
            time.sleep(down_s)
        directory = Path(state.directory)
        log = open(directory / f"{component}.log", "ab")  # noqa: SIM115 - owned by the child process
        proc = subprocess.Popen(
            state.commands[component],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        state.pids[component] = proc.pid
        save_state(state)
    if component == "kube-apiserver":
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not http_ok(f"{state.apiserver}/readyz", state.token):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ClusterError(
                    f"kube-apiserver did not come back:\n{tail(directory / 'kube-apiserver.log')}"
                )
            time.sleep(0.25)
    elif component == "etcd":
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not http_ok(f"http://127.0.0.1:{state.ports['etcd']}/health"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ClusterError(f"etcd did not come back:\n{tail(directory / 'etcd.log')}")
            time.sleep(0.25)
        # Back means served again: kube-apiserver's /readyz checks its etcd connection, which
        # takes it a few seconds to make again after etcd's restart.
        while "kube-apiserver" in state.pids and not http_ok(f"{state.apiserver}/readyz", state.token):
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"kube-apiserver did not serve again after etcd's restart:\n"
                    f"{tail(directory / 'kube-apiserver.log')}"
                )
            time.sleep(0.25)
    elif component == "kwok":
        # KWOK whose server cannot listen keeps running, serving no node's metrics or logs.
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not listening(state.ports["kwok"]):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ClusterError(
                    f"KWOK did not serve on 127.0.0.1:{state.ports['kwok']} again:\n{tail(directory / 'kwok.log')}"
                )
            time.sleep(0.25)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def real_nodes() -> list[realnode.RealNode]:
    """The running cluster's real nodes (none when it has only KWOK ones)."""
    state = load_state()
    if state is None:
        raise ClusterError("no local cluster is running; start one with `ksched cluster up`")
    return realnode.from_state(state.real_nodes)[0] if state.real_nodes else []


def load_image(archive: Path, name: str) -> list[str]:
    """Import an image archive into every real node's containerd, where ``imagePullPolicy:
    Never`` finds it as ``name`` (as containerd lists it); returns the nodes' names."""
    nodes = real_nodes()
    if not nodes:
        raise ClusterError(
            "the local cluster has no real nodes: start it with `ksched cluster up --real-nodes 1`"
        )
    realnode.load_image(nodes, archive, name)
    return [node.name for node in nodes]


def env_line() -> str:
    state = load_state()
    if state is None:
        raise ClusterError("no local cluster is running; start one with `ksched cluster up`")
    return f"export KUBECONFIG={state.kubeconfig}"
