"""The two leader-elected ``ksched run`` replicas the soak starts, kills, freezes and restarts,
and the exporter of per-node gauges that their Prometheus scrapes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ksched.bench.chaos.figures import LEASE, LEASE_NAME, LEASE_NS, METRIC_QUERY, SHARD_LEASE
from ksched.cluster import local
from ksched.cluster.gauges import GaugeServer
from ksched.cluster.processes import terminate


class Exporter(GaugeServer):
    """Per-node utilization gauges that drift with time, for the real Prometheus to scrape."""

    def __init__(self, seed: int) -> None:
        self.nodes: list[str] = []
        self.seed = seed
        super().__init__(self._render)

    def _render(self) -> bytes:
        tick = int(time.time() // 10)
        return (
            f"# TYPE {METRIC_QUERY} gauge\n"
            + "".join(
                f'{METRIC_QUERY}{{node="{n}"}} {random.Random(f"{self.seed}/{n}/{tick}").random():.3f}\n'
                for n in list(self.nodes)
            )
        ).encode()


class Replica:
    """One ``ksched run`` process with its own identity, credentials and webhook."""

    def __init__(
        self, identity: str, directory: Path, kubeconfig: Path, prometheus: str, sharded: bool = False
    ) -> None:
        self.identity = identity
        self.directory = directory
        self.kubeconfig = kubeconfig
        self.port = local.free_port()
        self.webhook_port = local.free_port()
        self.log = directory / f"{identity}.log"
        self.restarts = 0
        # Exits the soak did not cause (a crash, an error exit): how each ended, from its log.
        self.exits: list[str] = []
        self.frozen = False
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        config = {
            "apiVersion": "ksched.io/v1alpha1",
            "kind": "KschedConfiguration",
            "leaderElection": {
                "leaderElect": True,
                "resourceName": LEASE_NAME,
                "resourceNamespace": LEASE_NS,
                **LEASE,
            },
            "metrics": [
                {
                    "name": "utilization",
                    "source": "prometheus",
                    "query": METRIC_QUERY,
                    "nodeLabel": "node",
                    "prefer": "lower",
                    "missing": "neutral",
                    "weight": 5,
                    "maxAge": "30s",
                    "refresh": {"min": "1s", "max": "2s"},
                }
            ],
            "prometheus": {"url": prometheus, "timeout": "2s"},
            "webhook": {
                "enabled": True,
                "address": f"127.0.0.1:{self.webhook_port}",
                "hosts": ["127.0.0.1"],
                "configurationName": f"ksched-{identity}",
            },
        }
        if sharded:
            config["sharding"] = SHARD_LEASE
        self.config = directory / f"{identity}.json"
        self.config.write_text(json.dumps(config))

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ksched.commands.cli",
                    "run",
                    "--config",
                    str(self.config),
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--address",
                    f"127.0.0.1:{self.port}",
                    "--insecure-serving",
                    "--identity",
                    self.identity,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,
            )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        if self.running():
            assert self.proc is not None
            self.proc.send_signal(signum)

    def kill_and_restart(self, down_s: float) -> None:
        with self.lock:
            if self.proc is not None:
                if self.frozen:
                    self.proc.send_signal(signal.SIGCONT)
                    self.frozen = False
                self.proc.kill()
                self.proc.wait()
            time.sleep(down_s)
            self.start()
            self.restarts += 1

    def restart_if_exited(self) -> None:
        """A replica that exited on its own is recorded (exit code, last log lines) and
        restarted, as the kubelet would restart its container. A replica being killed or
        frozen by a fault (its lock held) is left to that fault: the arrivals do not wait."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            if self.proc is None or self.proc.poll() is None:
                return
            code = self.proc.returncode
            last = [line for line in self.tail(4000).splitlines() if line.strip()][-3:]
            self.exits.append(
                f"{self.identity} exited on its own with code {code}: {' | '.join(last)[-600:]}"
            )
            self.start()
            self.restarts += 1
        finally:
            self.lock.release()

    def freeze(self, seconds: float) -> None:
        with self.lock:
            if not self.running():
                return
            self.signal(signal.SIGSTOP)
            self.frozen = True
            time.sleep(seconds)
            self.signal(signal.SIGCONT)
            self.frozen = False

    def healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        terminate(self.proc, 20)

    def tail(self, chars: int | None = 3000) -> str:
        try:
            text = self.log.read_text(errors="replace")
            return text if chars is None else text[-chars:]
        except OSError:
            return ""
