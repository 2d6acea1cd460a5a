"""Creating, accounting for and clearing a harness's pods on a local control plane.

Owns: the parallel create that the demo and the side by side share, the clear between
phases, ``ksched run`` started as a process of its own until ready (this checkout's or
another build's, ``--ksched LABEL=COMMAND``), and the CPU and peak
RSS of a scheduler's process. Never: reuses a namespace between phases —
that is the caller's rule (see :mod:`ksched.bench.demo` on KWOK's deletes by name).
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ksched.cluster.processes import free_port, terminate
from ksched.errors import KschedError
from ksched.loop.client import ApiUnavailableError, Kube, Response
from ksched.objects import Obj

# Enough parallel creates that the API server, not the client, limits the creation rate.
CREATE_WORKERS = 32
SETTLE_TIMEOUT_S = 300.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# create_object(): tries of a POST whose connection was closed without an answer, and the pause between.
CREATE_TRIES = 3
CREATE_RETRY_S = 0.5


class LostPodsError(KschedError):
    """Pods that a phase created disappeared before the phase ended: something else deleted them."""


def _send(kube: Kube, method: str, path: str, **kw: Any) -> tuple[Response, bool]:
    """One request, tried again (up to CREATE_TRIES times, CREATE_RETRY_S apart) where the API
    server closed a pooled keep-alive connection without an answer; the answer, and whether
    it took more than one try."""
    for attempt in range(CREATE_TRIES):
        try:
            return kube.request(method, path, **kw), attempt > 0
        except ApiUnavailableError:
            if attempt + 1 == CREATE_TRIES:
                raise
            time.sleep(CREATE_RETRY_S)
    raise AssertionError("unreachable")


def create_object(kube: Kube, collection: str, obj: Obj, existing_ok: bool = False) -> Obj:
    """POST ``obj`` to ``collection``; returns the object created (``existing_ok``: or the one
    of that name that exists already). A connection the API server closed without an answer (a
    pooled keep-alive connection it had dropped as idle) is tried again (:func:`_send`); an
    object that then already exists is the one that first try created, and is read back."""
    name = obj["metadata"]["name"]
    r, again = _send(kube, "POST", collection, body=obj)
    if r.status == 409 and (again or existing_ok):
        r = kube.request("GET", f"{collection}/{name}")
    if not r.ok:
        raise KschedError(f"creating {obj.get('kind', 'object')} {name}: HTTP {r.status}: {r.data[:200]!r}")
    created: Obj = r.json()
    return created


def patch_object(kube: Kube, path: str, body: Obj) -> None:
    """Merge-patch the object at ``path`` with ``body``, tried again as :func:`create_object`
    is (a merge patch that sets fields lands the same twice). Raises KschedError for an error
    status."""
    r, _ = _send(kube, "PATCH", path, body=body, content_type="application/merge-patch+json")
    if not r.ok:
        raise KschedError(f"patching {path}: HTTP {r.status}: {r.data[:200]!r}")


def create_pods(kube: Kube, pods: list[Obj]) -> dict[str, str]:
    """Create the pods (:func:`create_object`); returns each created pod's UID by name."""

    def post(p: Obj) -> tuple[str, str]:
        created = create_object(kube, f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p)
        return p["metadata"]["name"], created["metadata"]["uid"]

    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        return dict(pool.map(post, pods))


def process_usage(pid: int) -> tuple[float, float]:
    """CPU seconds (user+system) and peak RSS in MiB of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    rss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            rss = int(line.split()[1]) / 1024
    return cpu, rss


def cpu_seconds(proc: subprocess.Popen[bytes]) -> float | None:
    """The CPU seconds ``proc`` used so far (user and system, :func:`process_usage`), or None
    where it cannot be read (it ended: its pid may be another process's by now)."""
    if proc.poll() is not None:
        return None
    try:
        return process_usage(proc.pid)[0]
    except (OSError, ValueError, IndexError):
        return None


def clear_pods(kube: Kube, namespace: str) -> None:
    # Thousands of pods take the API server longer than a request's default timeout.
    kube.request(
        "DELETE",
        f"/api/v1/namespaces/{namespace}/pods",
        query={"gracePeriodSeconds": 0},
        timeout=SETTLE_TIMEOUT_S,
    )
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while kube.request("GET", f"/api/v1/namespaces/{namespace}/pods", query={"limit": 1}).json()["items"]:
        if time.monotonic() > deadline:
            raise KschedError(f"the pods in {namespace} were not deleted")
        time.sleep(0.5)


# This checkout's ksched, as a command that ``run`` and its flags follow.
KSCHED_COMMAND = (sys.executable, "-m", "ksched.commands.cli")


def parse_kscheds(values: Sequence[str], taken: Collection[str]) -> dict[str, list[str]]:
    """``--ksched LABEL=COMMAND`` values: other ksched builds (say an older build's
    ``venv/bin/ksched``) to run beside this checkout's, by label; ``taken``: the labels the
    harness's own setups have."""
    out: dict[str, list[str]] = {}
    for v in values:
        label, sep, cmd = v.partition("=")
        if not sep or not label or not cmd.strip():
            raise KschedError(f"--ksched {v!r}: give LABEL=COMMAND, e.g. before=/opt/old/.venv/bin/ksched")
        if label in taken or label in out:
            raise KschedError(f"--ksched {v!r}: the label {label!r} is taken; choose another")
        out[label] = shlex.split(cmd)
    return out


@functools.cache
def insecure_serving(command: tuple[str, ...]) -> tuple[str, ...]:
    """``--insecure-serving`` where ``command``'s ``run`` has it (plain HTTP, no authentication:
    the harnesses read /readyz and /metrics without credentials), else nothing: a build from
    before secure serving serves plain HTTP already."""
    out = subprocess.run([*command, "run", "--help"], capture_output=True, text=True, check=False).stdout
    return ("--insecure-serving",) if "--insecure-serving" in out else ()


def start_ksched_run(
    kubeconfig: str, log: Path, config: Path | None = None, command: Sequence[str] = KSCHED_COMMAND
) -> tuple[subprocess.Popen[bytes], int]:
    """``ksched run`` (``command``: this checkout's, or another build's ``ksched``; no leader
    election, plain HTTP, unbuffered output to ``log``) once its /readyz answers 200, and the port it
    serves on. Whatever ends the wait (not ready in time, or SIGTERM's KeyboardInterrupt)
    stops the process here: the caller never got it, so its teardown could not."""
    port = free_port()
    cmd = [*command, "run", "--kubeconfig", kubeconfig]
    cmd += ["--address", f"127.0.0.1:{port}", "--no-leader-elect", *insecure_serving(tuple(command))]
    if config is not None:
        cmd += ["--config", str(config)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
    try:
        _wait_ready(port, proc, log)
    except BaseException:
        terminate(proc, 30)
        raise
    return proc, port


def _wait_ready(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise KschedError(f"ksched run exited:\n{log.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise KschedError(f"ksched did not become ready:\n{log.read_text(errors='replace')[-2000:]}")


# Pods per page of a full listing: a cluster of 150,000 pods is read in pieces, each slimmed
# before the next is asked for.
LIST_PAGE = 5000
# What a census keeps of a pod: what the invariant checker reads (requests, constraints, the
# node, the UID), not its managed fields, conditions or images.
_KEPT_SPEC = (
    "nodeName",
    "nodeSelector",
    "affinity",
    "topologySpreadConstraints",
    "containers",
    "initContainers",
    "overhead",
    "resources",
)
_KEPT_STATUS = ("phase", "containerStatuses", "initContainerStatuses")


def _slim(pod: Obj) -> Obj:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    return {
        "metadata": {
            k: meta[k] for k in ("name", "namespace", "uid", "labels", "deletionTimestamp") if k in meta
        },
        "spec": {k: spec[k] for k in _KEPT_SPEC if k in spec},
        "status": {k: status[k] for k in _KEPT_STATUS if k in status},
    }


def list_pods(kube: Kube, path: str = "/api/v1/pods") -> list[Obj]:
    """Every pod under ``path``, page by page, each slimmed to what :mod:`ksched.bench.invariants`
    reads."""
    return [_slim(p) for p in list_all(kube, path, "pods")]


def list_all(kube: Kube, path: str, what: str, timeout_s: float = SETTLE_TIMEOUT_S) -> Iterator[Obj]:
    """Every object under ``path``, page by page (``what`` names them in an error)."""
    query: dict[str, object] = {"limit": LIST_PAGE}
    while True:
        r = kube.request("GET", path, query=query, timeout=timeout_s)
        if not r.ok:
            raise KschedError(f"listing {what}: HTTP {r.status}: {r.data[:200]!r}")
        page = r.json()
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return
        query = {"limit": LIST_PAGE, "continue": token}


def process_rss(pid: int) -> float:
    """The resident set (VmRSS) of a running process now, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0
