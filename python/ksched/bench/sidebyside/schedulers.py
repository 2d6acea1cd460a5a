"""The schedulers as processes: started, paused, resumed, stopped, asked whether ready."""

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

from ksched.bench.pods import insecure_serving
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


class Scheduler:
    """One scheduler process, started for one workload and stopped after it."""

    def __init__(self, label: str, state: local.ClusterState, workdir: Path, ksched_cmd: list[str] | None):
        self.label = label
        self.state = state
        self.workdir = workdir
        self.ksched_cmd = ksched_cmd
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.log = workdir / f"{label}.log"

    @property
    def scheduler_name(self) -> str:
        return SCHEDULER_NAMES.get(self.label, KSCHED)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

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
            assert self.ksched_cmd is not None
            config = self.workdir / f"{self.label}-{workload}.json"
            config.write_text(json.dumps(ksched_config(workload, prometheus)))
            port = self.port = local.free_port()
            cmd = [*self.ksched_cmd, "run", "--config", str(config), "--kubeconfig", self.state.kubeconfig]
            cmd += ["--address", f"127.0.0.1:{port}", "--no-leader-elect"]
            cmd += insecure_serving(tuple(self.ksched_cmd))
            with_metrics = workload == "metrics"

            def ready() -> bool:
                return _ksched_ready(port, with_metrics)

        with open(self.log, "ab") as out:
            out.write(f"=== {workload}: {shlex.join(cmd)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready():
            if self.proc.poll() is not None:
                raise KschedError(f"{self.label} exited with {self.proc.returncode}:\n{_tail(self.log)}")
            if time.monotonic() > deadline:
                raise KschedError(
                    f"{self.label} was not ready after {READY_TIMEOUT_S:.0f} s:\n{_tail(self.log)}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


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


def _ksched_ready(port: int, with_metrics: bool) -> bool:
    status, body = _readyz(port)
    return status == 200 and (not with_metrics or "fresh" in body)


def metrics_status(port: int) -> str:
    """The metrics line of a running ksched's /readyz."""
    _, body = _readyz(port)
    return next((line.strip() for line in body.splitlines() if "metric" in line), body.strip()[:200])


def _tail(path: Path) -> str:
    try:
        return path.read_bytes()[-3000:].decode(errors="replace")
    except OSError:
        return "(no log)"
