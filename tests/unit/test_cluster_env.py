"""`ksched cluster env`: what `eval $(ksched cluster env)` sets, read from the state `up` records.

No cluster is started: each case writes the state file under its own ``$KSCHED_CLUSTER_DIR``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ksched.cluster.processes import ClusterState, save_state
from ksched.commands.cli import main
from ksched.commands.exit_codes import EXIT_BAD_INPUT, EXIT_OK

CASES = [
    # name, Prometheus URL recorded by `up` (None: started without it), want variables
    ("without Prometheus", None, {"KUBECONFIG": "{dir}/kubeconfig", "PROM": ""}),
    (
        "with Prometheus (--with-prometheus or --load-simulation)",
        "http://127.0.0.1:40123",
        {"KUBECONFIG": "{dir}/kubeconfig", "PROM": "http://127.0.0.1:40123"},
    ),
]


def _record(directory: Path, prometheus: str | None) -> None:
    save_state(
        ClusterState(
            directory=str(directory),
            kubeconfig=str(directory / "kubeconfig"),
            apiserver="https://127.0.0.1:6443",
            token="t",
            prometheus=prometheus,
        )
    )


def _evaluated(line: str, quoted: bool) -> dict[str, str]:
    """The variables a shell has after `eval "$(…)"` (or the docs' unquoted `eval $(…)`)."""
    substitution = '"$(cat)"' if quoted else "$(cat)"
    script = f'eval {substitution}; printf "%s\\n%s\\n" "$KUBECONFIG" "${{PROM-}}"'
    proc = subprocess.run(
        ["bash", "-c", script], input=line, capture_output=True, text=True, check=True, env={}
    )
    kubeconfig, prom = proc.stdout.split("\n")[:2]
    return {"KUBECONFIG": kubeconfig, "PROM": prom}


@pytest.mark.parametrize(("name", "prometheus", "want"), CASES, ids=[c[0] for c in CASES])
def test_cluster_env_exports_what_the_docs_use(
    name: str,
    prometheus: str | None,
    want: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path))
    _record(tmp_path, prometheus)
    assert main(["cluster", "env"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("export "), f"{name}: one export line, got {out!r}"
    want = {k: v.format(dir=tmp_path) for k, v in want.items()}
    for quoted in (True, False):
        got = _evaluated(out, quoted)
        assert got == want, f"{name} (quoted={quoted}): want {want}, got {got}"


def test_cluster_env_without_a_cluster_says_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path))
    assert main(["cluster", "env"]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "ksched cluster up" in captured.err
