"""The local cluster's state file, as `down`, `status` and `env` in another process read it
while `up` or a bench run records each component it starts."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ksched.cluster.processes import ClusterState, load_state, save_state


def test_a_reader_never_sees_a_half_written_state_while_components_are_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that caught the file between its truncation and its write would take it for no
    cluster at all: `down` would then leave every running component behind. Each save replaces
    the file whole, so every read finds some recorded state."""
    monkeypatch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path))
    state = ClusterState(
        directory=str(tmp_path),
        kubeconfig=str(tmp_path / "kubeconfig"),
        apiserver="https://127.0.0.1:6443",
        token="t",
        pids={f"component-{i}": 1000 + i for i in range(200)},
    )
    save_state(state)
    done = threading.Event()
    missed: list[int] = []
    reads = [0]

    def read() -> None:
        while not done.is_set():
            reads[0] += 1
            if load_state() is None:
                missed.append(reads[0])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(3000):
            save_state(state)
    finally:
        done.set()
        reader.join()
    assert reads[0] > 0
    assert not missed, f"{len(missed)} of {reads[0]} reads found no state"
    assert load_state() == state
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"], "no partial file is left behind"
