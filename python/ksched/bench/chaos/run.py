"""One soak from start to end: set up, drive arrivals and faults for the given minutes,
settle, check, tear down (keeping the logs when something failed)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ksched.bench.chaos.check import check, settle
from ksched.bench.chaos.faults import fault, schedule
from ksched.bench.chaos.figures import ChaosError, ChaosFigures, now
from ksched.bench.chaos.replicas import Exporter
from ksched.bench.chaos.soak import Soak
from ksched.cluster import local


def run(soak: Soak) -> ChaosFigures:
    """Set up, drive, settle and check one soak; tear it all down whatever happens."""
    started = time.monotonic()
    exporter = Exporter(soak.seed)
    exporter.start()
    directory = Path(tempfile.mkdtemp(prefix="ksched-chaos-"))
    previous = os.environ.get("KSCHED_CLUSTER_DIR")
    os.environ["KSCHED_CLUSTER_DIR"] = str(directory / "cluster")
    finished = False  # an exception keeps the logs too: that is when they are wanted
    try:
        state = soak.setup(directory, exporter)
        soak.setup_deployments(10)
        drive(soak, exporter)
        settle(soak)
        check(soak, state)
        finished = True
    finally:
        soak.stop.set()
        for r in soak.replicas:
            r.stop()
        # KSCHED_CHAOS_KEEP_LOGS=1 keeps them after a soak that passed too.
        keep = not (finished and soak.figures.ok()) or os.environ.get("KSCHED_CHAOS_KEEP_LOGS") == "1"
        if keep:
            with contextlib.suppress(OSError):
                shutil.copy(directory / "cluster" / "audit.log", directory / "audit.log")
        local.down()
        exporter.stop()
        if previous is None:
            os.environ.pop("KSCHED_CLUSTER_DIR", None)
        else:
            os.environ["KSCHED_CLUSTER_DIR"] = previous
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            soak.log(f"logs kept in {directory}")
    soak.figures.duration_s = round(time.monotonic() - started, 1)
    return soak.figures


def drive(soak: Soak, exporter: Exporter) -> None:
    """Pods arrive at the soak's rate for its minutes while the scheduled faults start in threads."""
    seconds = soak.minutes * 60.0
    soak.soak_start = now()
    soak.log(f"soaking {seconds:.0f} s at {soak.rate:g} pods/s, seed {soak.seed}")
    plan = schedule(soak, seconds)
    threads: list[threading.Thread] = []
    arrivals = random.Random(soak.seed)
    workers: list[threading.Thread] = []
    sem = threading.Semaphore(16)

    def arrive(rng: random.Random) -> None:
        try:
            soak.arrival(rng)
        finally:
            sem.release()

    begin = time.monotonic()
    next_fault = 0
    n = 0
    while True:
        elapsed = time.monotonic() - begin
        if elapsed >= seconds:
            break
        while next_fault < len(plan) and plan[next_fault][0] <= elapsed:
            _, kind = plan[next_fault]
            fault_rng = random.Random(f"{soak.seed}/{next_fault}")
            t = threading.Thread(target=fault, args=(soak, kind, fault_rng), daemon=True)
            t.start()
            threads.append(t)
            next_fault += 1
        target = begin + n / soak.rate
        delay = target - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sem.acquire()
        rng = random.Random(arrivals.random())
        w = threading.Thread(target=arrive, args=(rng,), daemon=True)
        w.start()
        workers.append(w)
        n += 1
        if n % max(1, int(soak.rate)) == 0:  # about once a second
            for r in soak.replicas:
                r.restart_if_exited()
        with soak.node_lock:
            exporter.nodes = list(soak.node_names)
    soak.log("arrivals over; waiting for the faults in progress")
    for t in threads:
        t.join(120)
    for w in workers:
        w.join(60)
    soak.soak_end = now()
    for r in soak.replicas:
        r.restart_if_exited()
    for r in soak.replicas:
        for e in r.exits:
            soak.log(e)


def run_chaos(
    nodes: int,
    minutes: float,
    rate: float,
    seed: int,
    log: Callable[[str], None] | None = None,
    replicas: int = 0,
) -> ChaosFigures:
    """``replicas``: that many sharded replicas, every one binding (0: two leader-elected)."""
    if nodes < 20:
        raise ChaosError("--nodes: the soak needs at least 20 nodes")
    if minutes <= 0 or rate <= 0:
        raise ChaosError("--minutes and --rate must be positive")
    if replicas == 1 or replicas < 0:
        raise ChaosError("--replicas: a sharded soak needs at least 2 replicas")
    return run(Soak(nodes, minutes, rate, seed, log or (lambda _: None), replicas))
