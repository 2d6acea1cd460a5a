"""The quality harness's pools: disjoint, equal in size and in node shapes."""

from __future__ import annotations

import collections

import pytest

from ksched.bench.quality.pooled import pools
from ksched.cluster.kwok import fake_nodes
from ksched.errors import KschedError


def _shapes(names: list[str], by_name: dict[str, tuple[str, str]]) -> collections.Counter[tuple[str, str]]:
    return collections.Counter(by_name[n] for n in names)


@pytest.mark.parametrize(
    ("nodes", "count", "size"), [(1000, 4, 40), (1000, 4, 248), (100, 3, 32), (16, 4, 4)]
)
def test_pools_are_disjoint_and_alike(nodes: int, count: int, size: int) -> None:
    items = fake_nodes(nodes, 3)["items"]
    by_name = {
        n["metadata"]["name"]: (n["status"]["allocatable"]["cpu"], n["status"]["allocatable"]["memory"])
        for n in items
    }
    out = pools(items, count, size)
    assert [len(p) for p in out] == [size] * count
    assert len({n for p in out for n in p}) == count * size, "no node in two pools"
    assert all(_shapes(p, by_name) == _shapes(out[0], by_name) for p in out), "every pool has the same shapes"


def test_too_few_nodes_is_a_clear_error() -> None:
    with pytest.raises(KschedError, match="pools of at most 24 nodes"):
        pools(fake_nodes(100, 3)["items"], 4, 40)
