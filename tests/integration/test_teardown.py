"""`down` stops exactly what `up` started (runs on its own small cluster), and with real nodes
leaves the host as it found it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ksched.cluster import local, realnode
from ksched.cluster.load import LoadSimulation
from ksched.cluster.processes import alive
from tests.integration.helpers import kubectl, unavailable, wait_for

pytestmark = pytest.mark.cluster


def test_down_leaves_no_process(
    cluster: local.ClusterState, tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path))
    state = local.up(nodes=2)
    pids = dict(state.pids)
    assert all(alive(pid, name) for name, pid in pids.items())
    local.down()
    assert not any(alive(pid, name) for name, pid in pids.items())
    assert not os.path.exists(state.directory)


def test_down_leaves_no_process_of_the_load_simulation(
    cluster: local.ClusterState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulation's own Python process (``counters``) is a component like the others:
    recognised as running, and stopped by ``down``."""
    monkeypatch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path))
    state = local.up(nodes=1, zones=1, load_simulation=LoadSimulation(scrape_interval_s=5.0))
    pids = dict(state.pids)
    assert "counters" in pids
    assert all(alive(pid, name) for name, pid in pids.items())
    local.down()
    assert not any(alive(pid, name) for name, pid in pids.items())
    assert not _processes_naming(tmp_path)


def _processes_naming(path: Path) -> list[str]:
    """Command lines of the running processes that name ``path`` (a cluster's directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(path) in cmdline and state != "Z":
            found.append(cmdline)
    return found


def test_down_during_a_restart_leaves_no_process(
    cluster: local.ClusterState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A soak's fault thread may be restarting kube-apiserver when the soak tears down: the
    restart must not start a kube-apiserver that outlives the cluster."""
    monkeypatch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path))
    local.up(nodes=2)
    outcome: list[BaseException] = []

    def restart() -> None:
        try:
            local.restart("kube-apiserver", down_s=2)
        except BaseException as err:
            outcome.append(err)

    fault = threading.Thread(target=restart)
    fault.start()
    time.sleep(0.5)  # the restart has stopped kube-apiserver and waits to start it again
    local.down()
    fault.join(120)
    assert not fault.is_alive()
    assert [type(e) for e in outcome] == [local.ClusterError], outcome
    assert _processes_naming(tmp_path) == []
    assert not (tmp_path / "state.json").exists()


def test_sigterm_tears_down_a_bench_run(cluster: local.ClusterState, tmp_path: Path) -> None:
    """A bench run that started its own control plane (here the fuzzer) and is stopped with
    SIGTERM, as a CI timeout or `kill` would, stops every component it started and removes
    their state, as Ctrl-C does."""
    env = dict(os.environ, KSCHED_CLUSTER_DIR=str(tmp_path / "cluster"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ksched.commands.cli", "bench", "--fuzz", "--specs", "5000", "--seed", "3"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        state_file = tmp_path / "cluster" / "state.json"
        deadline = time.monotonic() + 180
        state = None
        # Wait until the control plane is up and the specs are being created through it.
        while time.monotonic() < deadline and proc.poll() is None:
            state = json.loads(state_file.read_text()) if state_file.exists() else None
            if state and "kwok" in state.get("pids", {}):
                break
            time.sleep(0.5)
        assert state is not None and proc.poll() is None, "the fuzzer did not start its control plane"
        pids = dict(state["pids"])
        time.sleep(3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert not [name for name, pid in pids.items() if alive(pid, name)]
    # Nor anything it started beside the control plane (its `ksched run` names the kubeconfig).
    assert _processes_naming(tmp_path) == []
    assert not state_file.exists()


def _host() -> dict[str, object]:
    """What real nodes may change outside their directory: links, addresses, routes, every
    iptables table, forwarding, network namespaces, the kubelet's and CNI's host folders,
    mounts, top-level cgroups and the processes of a runtime."""

    def out(*cmd: str) -> list[str]:
        done = subprocess.run(list(cmd), capture_output=True, text=True, check=False)
        return sorted(line for line in done.stdout.splitlines() if line and not line.startswith("#"))

    rules = [re.sub(r"\[\d+:\d+\]", "", line) for t in ("iptables-save", "ip6tables-save") for line in out(t)]
    # What a kubelet makes at the top of each hierarchy (others' cgroups come and go meanwhile).
    cgroups = sorted(
        str(p)
        for p in Path("/sys/fs/cgroup").glob("*/*")
        if p.is_dir() and re.match(r"ksched-|kubepods", p.name)
    )
    folders = ("/run/netns", "/var/lib/cni", "/var/log/containers", "/var/log/pods", "/run/containerd")
    return {
        "links": [line.split("<")[0] for line in out("ip", "-o", "link", "show")],
        "addresses": out("ip", "-o", "addr", "show"),
        "routes": out("ip", "route", "show"),
        "rules": rules,
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text(),
        "folders": {f: sorted(os.listdir(f)) if os.path.isdir(f) else None for f in folders},
        "mounts": sorted(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()),
        "cgroups": cgroups,
        "runtime": [c for c in _processes_naming(Path("/")) if re.search(r"containerd|kubelet|pause", c)],
    }


def test_down_leaves_nothing_of_real_nodes_on_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up --real-nodes` changes the host (bridges, iptables, forwarding, netns, mounts, cgroups);
    after `down` with a pod running on the node, the host is as it was."""
    if os.geteuid() != 0:
        unavailable("real nodes need root")
    monkeypatch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path))
    before = _host()
    state = local.up(nodes=1, real_nodes=1, with_scheduler=True)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sleeper", "namespace": "default"},
        "spec": {
            "nodeSelector": {realnode.NODE_LABEL: "true"},
            "containers": [{"name": "c", "image": realnode.PAUSE_IMAGE, "imagePullPolicy": "Never"}],
        },
    }
    assert kubectl(state, "create", "-f", "-", input_=json.dumps(pod)).returncode == 0
    running = wait_for(
        lambda: kubectl(state, "get", "pod", "sleeper", "-o", "jsonpath={.status.phase}").stdout == "Running",
        60,
    )
    assert running, kubectl(state, "describe", "pod", "sleeper").stdout
    during = _host()
    assert during["links"] != before["links"] and during["rules"] != before["rules"]
    local.down()
    after = _host()
    assert {k: v for k, v in after.items() if v != before[k]} == {}
    assert not tmp_path.joinpath("state.json").exists()
