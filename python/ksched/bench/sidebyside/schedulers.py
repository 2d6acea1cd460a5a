"""The schedulers as processes: started, paused, resumed, stopped, asked whether ready. A ksched
run with ``replicas`` above 1 is that many processes with ``sharding`` on, each binding onto the
nodes it owns (docs/sharding.md): paused, resumed, measured and stopped together."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from ksched.bench.pods import insecure_serving, process_rss, process_usage
from ksched.bench.sidebyside.options import (
    KSCHED,
    KUBE_SCHEDULER,
    KUBE_SCHEDULER_QPS,
    NULL,
    READY_TIMEOUT_S,
    SCHEDULER_NAMES,
    STOP_TIMEOUT_S,
)
from ksched.bench.sidebyside.workloads import ksched_config
from ksched.cluster import local
from ksched.cluster.build import Pins, ensure_built, nullbinder_binary
from ksched.errors import KschedError

# Sharded replicas here: a backlog is created while they are paused (SIGSTOP; 3,000 pods took
# 44 s on 500 nodes of the 2-core host), and the API server is restarted under them. A renew
# deadline past both keeps a pause from counting as a replica gone: at the default 6 s each
# replica waits a read deadline after SIGCONT before it binds, timed as part of the drain.
# One process, without leader election, has no such wait.
BENCH_SHARDING = {
    "enabled": True,
    "leaseDuration": "120s",
    "renewDeadline": "90s",
    "retryPeriod": "1s",
    "readDeadline": "3s",
}


class Scheduler:
    """One scheduler process, started for one workload and stopped after it."""

    def __init__(
        self,
        label: str,
        state: local.ClusterState,
        workdir: Path,
        ksched_cmd: list[str] | None,
        replicas: int = 1,
    ):
        self.label = label
        self.state = state
        self.workdir = workdir
        self.ksched_cmd = ksched_cmd
        self.replicas = replicas
        self.procs: list[subprocess.Popen[bytes]] = []
        # A ksched's endpoint, by replica (the first is ``port``).
        self.ports: list[int] = []
        self.log = workdir / f"{label}.log"

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.procs[0] if self.procs else None

    def startup_lines(self) -> list[str]:
        """ksched's start-up profile from its log since the last start (where its list's time
        went, when its informers synced and its node table was ready), a line a replica."""
        if not self.log.exists():
            return []
        # One "=== " header a process started: the last start's, one a replica.
        last = self.log.read_text(errors="replace").split("\n=== ")[-max(len(self.procs), 1) :]
        marks = ("informers synced", "node table built")
        return [
            line.split(": ", 1)[-1]
            for segment in last
            for line in segment.splitlines()
            if any(m in line for m in marks)
        ]

    @property
    def port(self) -> int | None:
        return self.ports[0] if self.ports else None

    @property
    def scheduler_name(self) -> str:
        return SCHEDULER_NAMES.get(self.label, KSCHED)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def pause(self) -> None:
        for p in self.procs:
            os.kill(p.pid, signal.SIGSTOP)

    def resume(self) -> None:
        for p in self.procs:
            os.kill(p.pid, signal.SIGCONT)

    def usage(self) -> tuple[float, float]:
        """CPU seconds and peak RSS (MiB), summed over the replicas."""
        each = [process_usage(p.pid) for p in self.procs]
        return sum(c for c, _ in each), sum(r for _, r in each)

    def cpu_by_replica(self) -> list[float]:
        return [process_usage(p.pid)[0] for p in self.procs]

    def counter(self, series: str) -> float:
        """A ksched counter summed over the replicas' /metrics (each line whose name and labels
        start with ``series``); 0 for a scheduler without one."""
        import urllib.request

        total = 0.0
        for port in self.ports:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    text = r.read().decode(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith(series) and not line.startswith("#"):
                    total += float(line.rsplit(" ", 1)[1])
        return total

    def rss(self) -> float:
        """Resident set now (MiB), summed over the replicas."""
        return sum(process_rss(p.pid) for p in self.procs)

    def start(self, workload: str, prometheus: str | None) -> None:
        ready: Callable[[], bool]
        if self.label == NULL:
            ready_file = self.workdir / f"{self.label}-{workload}.ready"
            ready_file.unlink(missing_ok=True)
            cmd = [str(nullbinder_binary()), f"--kubeconfig={self.state.kubeconfig}"]
            cmd += [f"--scheduler-name={self.scheduler_name}", f"--ready-file={ready_file}"]
            ready = ready_file.exists
        elif self.label == KUBE_SCHEDULER:
            args, port = local.kube_scheduler_args(self.state, KUBE_SCHEDULER_QPS, 0, "bench-kube-scheduler")
            cmd = [str(ensure_built(Pins(), with_helm=False) / "kube-scheduler"), *args]

            def ready() -> bool:
                return local.http_ok(f"https://127.0.0.1:{port}/readyz")
        else:
            self._start_kscheds(workload, prometheus)
            return
        self._launch([cmd], workload, ready)

    def _start_kscheds(self, workload: str, prometheus: str | None) -> None:
        """``replicas`` ksched processes: one without leader election, or a sharded group that is
        ready once every replica binds and reads all the others live."""
        assert self.ksched_cmd is not None
        config = ksched_config(workload, prometheus)
        if self.replicas > 1:
            config["leaderElection"] = {"resourceName": f"bench-{self.label}-{workload}"[:60].rstrip("-")}
            config["sharding"] = BENCH_SHARDING
        path = self.workdir / f"{self.label}-{workload}.json"
        path.write_text(json.dumps(config))
        self.ports = [local.free_port() for _ in range(self.replicas)]
        cmds = []
        for i, port in enumerate(self.ports):
            cmd = [*self.ksched_cmd, "run", "--config", str(path), "--kubeconfig", self.state.kubeconfig]
            cmd += ["--address", f"127.0.0.1:{port}", *insecure_serving(tuple(self.ksched_cmd))]
            cmd += ["--no-leader-elect"] if self.replicas == 1 else ["--identity", f"{self.label}-{i}"]
            cmds.append(cmd)
        with_metrics = workload == "metrics"
        members = f"shards ok: {self.replicas} live replicas" if self.replicas > 1 else ""

        def ready() -> bool:
            return all(_ksched_ready(port, with_metrics, members) for port in self.ports)

        self._launch(cmds, workload, ready)

    def _launch(self, cmds: list[list[str]], workload: str, ready: Callable[[], bool]) -> None:
        with open(self.log, "ab") as out:
            for cmd in cmds:
                out.write(f"=== {workload}: {shlex.join(cmd)}\n".encode())
                out.flush()
                self.procs.append(
                    subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready():
            ended = next((p for p in self.procs if p.poll() is not None), None)
            if ended is not None:
                raise KschedError(f"{self.label} exited with {ended.returncode}:\n{_tail(self.log)}")
            if time.monotonic() > deadline:
                raise KschedError(
                    f"{self.label} was not ready after {READY_TIMEOUT_S:.0f} s:\n{_tail(self.log)}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                    proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []
        self.ports = []


def _readyz(port: int) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return int(r.status), r.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except OSError:
        return 0, ""


def _ksched_ready(port: int, with_metrics: bool, members: str = "") -> bool:
    status, body = _readyz(port)
    return status == 200 and (not with_metrics or "fresh" in body) and members in body


def metrics_status(port: int) -> str:
    """The metrics line of a running ksched's /readyz."""
    _, body = _readyz(port)
    return next((line.strip() for line in body.splitlines() if "metric" in line), body.strip()[:200])


def _tail(path: Path) -> str:
    try:
        return path.read_bytes()[-3000:].decode(errors="replace")
    except OSError:
        return "(no log)"
