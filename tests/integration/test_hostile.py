"""CI's small version of ``ksched bench --hostile`` (the documented run: 100 nodes, 2,000 pods):
ksched on the test cluster with and without a 10Ei node, a node priced "inf", 100 idle TCP
clients on its webhook and 100 half-sent requests on its HTTP server."""

from __future__ import annotations

import math

import pytest

from ksched.bench.hostile import render, run_hostile
from ksched.cluster import local

pytestmark = pytest.mark.cluster


def test_bad_inputs_neither_lose_nor_stall_pods(cluster: local.ClusterState) -> None:
    result = run_hostile(pods=300, routed=60, clients=100, nodes=cluster.nodes, out=None, state=cluster)
    print(render(result))
    assert result["problems"] == [], render(result)
    hostile = result["phases"][1]
    assert hostile["bound"] == hostile["pods"] == 300
    # Every routed pod went through the webhook and was answered (within the API server's 10 s
    # timeout: a refused one is a problem above), with the clients held.
    assert hostile["webhook_calls"] >= 60 and hostile["routed"] == 60
    assert not math.isnan(result["rate_ratio"])
