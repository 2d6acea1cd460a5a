"""The local cluster's state file and the processes it records.

Owns :class:`ClusterState` (the kubeconfig, API server and tokens, and each
component's pid, command line and port), saved as JSON under
``~/.cache/ksched/cluster`` (or ``$KSCHED_CLUSTER_DIR``) as each component
starts, so that ``down`` or ``restart``, in this process or another, finds
exactly those processes; :class:`Launcher`, which starts a component with its
log and waits until it is ready; and the probes both use (is a recorded pid
still that binary, does a URL answer 200, a free loopback port).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ksched.errors import KschedError

READY_TIMEOUT_S = 120.0
LOG_TAIL_BYTES = 4000


class ClusterError(KschedError):
    """The local control plane could not be started or stopped."""


@dataclass
class ClusterState:
    directory: str
    kubeconfig: str
    apiserver: str
    token: str
    unprivileged_token: str = ""
    pids: dict[str, int] = field(default_factory=dict)
    # Each component's command line, so `restart` can start it again exactly.
    commands: dict[str, list[str]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    nodes: int = 0
    prometheus: str | None = None
    # `up --real-nodes`: the nodes and what they changed on the host (ksched.cluster.realnode).
    real_nodes: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        lines = [
            f"local cluster up: {self.nodes} fake nodes"
            + (f", {len(self.real_nodes['nodes'])} real nodes" if self.real_nodes.get("nodes") else "")
            + f", API server {self.apiserver}",
            f"  components: {', '.join(f'{k} (pid {v})' for k, v in self.pids.items())}",
            f"  kubeconfig: {self.kubeconfig}",
        ]
        if self.prometheus:
            lines.append(f"  prometheus: {self.prometheus}")
        lines += [
            "use it with:",
            f"  export KUBECONFIG={self.kubeconfig}",
            "  kubectl get nodes",
            "stop it with: ksched cluster down",
        ]
        return "\n".join(lines)


def state_dir() -> Path:
    return Path(os.environ.get("KSCHED_CLUSTER_DIR") or Path.home() / ".cache" / "ksched" / "cluster")


def _state_file() -> Path:
    return state_dir() / "state.json"


def load_state() -> ClusterState | None:
    try:
        return ClusterState(**json.loads(_state_file().read_text()))
    except (OSError, ValueError, TypeError):
        return None


def save_state(state: ClusterState) -> None:
    """Write the state file whole: into a temporary file beside it, then renamed over it, so
    that ``down`` or ``status`` in another process, reading while a component starts, reads the
    previous state or this one and never a half-written file (which it would take for no
    cluster, leaving the running components behind)."""
    Path(state.directory).mkdir(parents=True, exist_ok=True)
    target = _state_file()
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    partial.write_text(json.dumps(asdict(state), indent=2))
    os.replace(partial, target)


# A component that is one of ksched's own modules runs as ``python -m`` this, its name filled in.
PYTHON_COMPONENT = "ksched.cluster.{}"


def alive(pid: int, binary: str) -> bool:
    """Whether ``pid`` still runs the component ``binary``: an executable of that name, or
    ksched's own module of that name under Python (:data:`PYTHON_COMPONENT`), so that a
    recycled pid is never taken for it."""
    try:
        args = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
    except OSError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    named = os.path.basename(args[0]) == binary or args[1:3] == ["-m", PYTHON_COMPONENT.format(binary)]
    return named and ") Z " not in stat


def threads_left(pid: int) -> bool:
    """Whether a thread of the process still runs. A Go process's group leader shows as a
    zombie (so :func:`alive` says no) while its other threads are still exiting, and until
    the last of them has, the process's files and listening sockets stay open: KWOK started
    again at once then failed with "bind: address already in use" and served nothing."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for task in tasks:
        try:
            stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] not in ("Z", "X"):
            return True
    return False


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    import socket

    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def terminate(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Stop a child process: SIGTERM, then SIGKILL if it has not exited within ``timeout_s``;
    a SIGSTOPped child is resumed first, since a stopped process cannot act on SIGTERM."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGCONT)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def apt_install(packages: tuple[str, ...], what: str) -> str | None:
    """``apt-get update`` then ``apt-get install`` of ``packages`` (root only); None when it
    ran, else why not (not root, no apt-get, or the install's own output), for the caller's
    error, which names how to install them by hand."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "needs root and apt-get"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
    ):
        print(f"[ksched] installing {what}: {' '.join(cmd)}", file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        if proc.returncode != 0 and cmd[1] == "install":
            return (proc.stdout + proc.stderr)[-3000:]
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path) -> str:
    try:
        data = path.read_bytes()[-LOG_TAIL_BYTES:]
    except OSError:
        return "(no log)"
    return data.decode(errors="replace")


class Launcher:
    """Starts the components of one cluster, recording each in its state as it starts."""

    def __init__(self, directory: Path, bin_dir: Path, state: ClusterState):
        self.dir = directory
        self.bin = bin_dir
        self.state = state
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, binary: str | Path, args: list[str]) -> None:
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child process
        exe = str(binary) if os.path.isabs(str(binary)) else str(self.bin / str(binary))
        proc = subprocess.Popen(
            [exe, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.procs[name] = proc
        self.state.pids[name] = proc.pid
        self.state.commands[name] = [exe, *args]
        save_state(self.state)

    def check(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise ClusterError(
                    f"{name} exited with status {proc.returncode} during start-up; last lines of its log:\n{tail(self.dir / f'{name}.log')}"
                )

    def wait(self, what: str, ready: Any, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            if ready():
                return
            time.sleep(0.25)
        logs = "\n".join(f"--- {n}.log ---\n{tail(self.dir / f'{n}.log')[-1500:]}" for n in self.procs)
        raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}\n{logs}")


def kubectl(
    state: ClusterState, bin_dir: Path, *args: str, input_: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(bin_dir / "kubectl"), "--kubeconfig", state.kubeconfig, *args],
        input=input_,
        capture_output=True,
        check=False,
    )


def http_ok(url: str, token: str | None = None) -> bool:
    import ssl
    import urllib.request

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False
