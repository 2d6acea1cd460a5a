"""The ``simulate`` phase: every spec alone, then the accepted pods in batches, through the
command line's own entry in process; the exit code and output must be sane."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any

import yaml

from ksched.bench.fuzz.report import FUZZ_NODES, NAMESPACE, SIM_BATCH, Cli, FuzzReport, Spec, escaped
from ksched.cluster import local
from ksched.objects import Obj


def _simulate_nodes() -> list[Obj]:
    nodes: list[Obj] = local.fake_nodes(FUZZ_NODES, 3)["items"]
    nodes[-1]["spec"] = {"taints": [{"key": "dedicated", "value": "fuzz", "effect": "NoSchedule"}]}
    return nodes


def call_simulate(
    cli: Cli, path: Path, args: list[str] | None = None
) -> tuple[int | None, str, str, str | None]:
    """``ksched simulate PATH -o json [ARGS]`` in process: (exit code, stdout, stderr, escaped
    exception)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli(["simulate", str(path), "-o", "json", *(args or [])])
    except BaseException as exc:  # a traceback is what the fuzzer looks for
        if isinstance(exc, KeyboardInterrupt):
            raise
        return None, out.getvalue(), err.getvalue(), escaped(exc)
    return code, out.getvalue(), err.getvalue(), None


def check_simulate(
    report: FuzzReport,
    where: str,
    spec: int | None,
    result: tuple[int | None, str, str, str | None],
    pods: int,
    kind: str = "pods",
) -> int | None:
    """Whether ``simulate`` answered sanely (exit 0, 1 or 2; one ``error:`` line for 2; JSON
    placements, each placed or with a message, for 0 and 1): a defect of ``kind`` if not.
    Returns the exit code, None for an exception."""

    def defect(spec: int | None, detail: str) -> None:
        report.defect(where, spec, detail, kind=kind)

    code, out, err, escaped = result
    if escaped is not None:
        defect(spec, f"traceback: {escaped}")
        return None
    if code == 2:
        lines = err.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("error: "):
            defect(spec, f"exit 2 without a one-line message: {err[:300]!r}")
    elif code in (0, 1):
        try:
            placements = json.loads(out)["placements"]
        except (ValueError, KeyError, TypeError):
            defect(spec, f"exit {code} without JSON placements: {out[:200]!r}")
            return code
        if len(placements) > pods:
            defect(spec, f"{len(placements)} placements for {pods} pods")
        for p in placements:
            if not p.get("node") and not p.get("message"):
                defect(spec, f"pod {p.get('pod')} not placed and no message")
        if code == 1 and all(p.get("node") for p in placements):
            defect(spec, "exit 1 with every pod placed")
    else:
        defect(spec, f"exit code {code}")
    return code


def _write_cluster(path: Path, objects: list[Any], as_yaml: bool) -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": objects}
    if as_yaml:
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    else:
        path.write_text(json.dumps(doc))


def simulate_phase(
    report: FuzzReport, specs: list[Spec], accepted: list[Obj], workdir: Path, cli: Cli
) -> None:
    """Every spec alone, then the accepted pods (as the API server returned them) in batches."""
    nodes = _simulate_nodes()
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {"x": "y"}},
    }
    path = workdir / "simulate-cluster"
    for s in specs:
        try:
            _write_cluster(path, [*nodes, namespace, s.pod], as_yaml=s.index % 4 == 3)
        except (ValueError, TypeError, RecursionError, yaml.YAMLError):
            _write_cluster(path, [*nodes, namespace, s.pod], as_yaml=False)
        report.simulate_calls += 1
        code = check_simulate(report, "simulate", s.index, call_simulate(cli, path), 1)
        report.simulate_exit[-1 if code is None else code] += 1
    for start in range(0, len(accepted), SIM_BATCH):
        batch = [_as_pending(p) for p in accepted[start : start + SIM_BATCH]]
        _write_cluster(path, [*nodes, namespace, *batch], as_yaml=(start // SIM_BATCH) % 2 == 1)
        report.simulate_batches += 1
        code = check_simulate(report, "simulate batch", None, call_simulate(cli, path), len(batch))
        report.simulate_batch_exit[-1 if code is None else code] += 1


def _as_pending(pod: Obj) -> Obj:
    """An accepted pod as a cluster file would list it, for ksched unless it was bound at creation."""
    pod = copy.deepcopy(pod)
    pod.pop("status", None)
    spec = pod.get("spec") or {}
    if not spec.get("nodeName"):
        spec["schedulerName"] = "ksched"
    return pod
