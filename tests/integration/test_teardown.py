"""`down` stops exactly what `up` started (runs on its own small cluster)."""

from __future__ import annotations

import os

import pytest

from ksched.cluster import local

pytestmark = pytest.mark.cluster


def test_down_leaves_no_process(
    cluster: local.ClusterState, tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path))
    state = local.up(nodes=2)
    pids = dict(state.pids)
    assert all(local._alive(pid, name) for name, pid in pids.items())
    local.down()
    assert not any(local._alive(pid, name) for name, pid in pids.items())
    assert not os.path.exists(state.directory)
