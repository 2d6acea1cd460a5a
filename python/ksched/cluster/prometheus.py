"""Prometheus beside the local cluster: its binary, and a server scraping given targets.

Owns finding Prometheus (Debian's package, installed with apt-get when missing and
running as root) and starting it on a free port with a one-second scrape of the
targets the tests and benchmarks name, and, for the load simulation, the scrape of
every KWOK node with its recording rules (:mod:`ksched.cluster.load`), and the real
nodes' kubelets (:mod:`ksched.cluster.realnode`); the cluster's
state records its address.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ksched.cluster import load
from ksched.cluster.processes import ClusterError, Launcher, free_port, http_ok


def prometheus_binary() -> str:
    """Prometheus from Debian's package, installed with apt-get when missing and run as root.

    The package also ships promtool beside it (the test suite checks the alerting rules with it)."""
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        for cmd in (
            ["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"],
        ):
            proc = subprocess.run(
                cmd, capture_output=True, check=False, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            )
            if proc.returncode != 0 and cmd[1] == "install":
                raise ClusterError(
                    f"installing Prometheus with apt-get failed:\n{proc.stdout.decode()[-2000:]}{proc.stderr.decode()[-2000:]}"
                )
        if Path("/usr/bin/prometheus").exists():
            return "/usr/bin/prometheus"
    raise ClusterError("Prometheus is not installed: install Debian's package (apt-get install prometheus)")


def start_prometheus(
    launcher: Launcher,
    targets: str,
    simulation: load.LoadSimulation | None,
    jobs: list[dict[str, Any]] | None = None,
) -> None:
    """Start Prometheus scraping ``targets`` (comma-separated host:port) every second and,
    with ``simulation``, every KWOK node's resource metrics, recording node utilisation;
    ``jobs`` are further scrape configurations (the real nodes' kubelets)."""
    state = launcher.state
    port = free_port()
    scraped = [t.strip() for t in targets.split(",") if t.strip()]
    config: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "ksched-targets", "static_configs": [{"targets": scraped}]}]
        if scraped
        else [],
    }
    if simulation is not None:
        rules = launcher.dir / "prometheus-rules.yml"
        rules.write_text(json.dumps(load.recording_rules(simulation)))
        config["rule_files"] = [str(rules)]
        config["scrape_configs"].append(
            load.prometheus_scrape_config(f"127.0.0.1:{state.ports['kwok']}", simulation)
        )
    config["scrape_configs"] += jobs or []
    prom_config = launcher.dir / "prometheus.yml"
    prom_config.write_text(json.dumps(config))
    state.ports["prometheus"] = port
    launcher.start(
        "prometheus",
        prometheus_binary(),
        [
            f"--config.file={prom_config}",
            f"--storage.tsdb.path={launcher.dir / 'prometheus'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1h",
        ],
    )
    state.prometheus = f"http://127.0.0.1:{port}"
    launcher.wait("Prometheus", lambda: http_ok(f"{state.prometheus}/-/ready"))
