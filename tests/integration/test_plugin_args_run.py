"""``ksched run`` with upstream's plugin args on the real local control plane:
NodeAffinity ``addedAffinity`` keeps every pod of the profile on the nodes it
names (with upstream's reason for the others), NodeResourcesFit
``ignoredResources`` lets a pod asking for an unadvertised extended resource
bind, and a bound pod's sidecar holds its host port."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksched.cluster import local
from ksched.loop.client import Kube
from tests.integration.helpers import Namespaces, create, events_for, ksched, make_pod, wait_for

pytestmark = pytest.mark.cluster

LABEL = "ksched-test/pool"
PORT = 7070


def test_added_affinity_ignored_resources_and_sidecar_ports(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("plugin-args")
    node = local.fake_nodes(1, 1)["items"][0]
    name = "kwok-args-node"
    node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    node["metadata"]["labels"][LABEL] = "args"
    sidecar = {
        "name": "proxy",
        "image": "proxy",
        "restartPolicy": "Always",
        "ports": [{"containerPort": PORT, "hostPort": PORT}],
    }
    holder = make_pod("holder", ns, nodeName=name, initContainers=[sidecar])
    placed = make_pod("placed", ns)
    # Extended resources are not overcommitted: the API server wants the limit equal to the request.
    resources = placed["spec"]["containers"][0]["resources"]
    resources["requests"]["example.com/dongle"] = "1"
    resources["limits"] = {"example.com/dongle": "1"}
    elsewhere = make_pod("elsewhere", ns, nodeSelector={"kubernetes.io/hostname": "kwok-node-00000"})
    port = make_pod("port", ns)
    port["spec"]["containers"][0]["ports"] = [{"containerPort": PORT, "hostPort": PORT}]
    config = {
        "profiles": [
            {
                "schedulerName": "ksched",
                "pluginConfig": [
                    {
                        "name": "NodeAffinity",
                        "args": {
                            "addedAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [
                                        {
                                            "matchExpressions": [
                                                {"key": LABEL, "operator": "In", "values": ["args"]}
                                            ]
                                        }
                                    ]
                                }
                            }
                        },
                    },
                    {"name": "NodeResourcesFit", "args": {"ignoredResourceGroups": ["example.com"]}},
                ],
            }
        ]
    }
    try:
        create(kube, [node, holder])
        with ksched(cluster, tmp_path, "args", {"leaderElect": False}, **config) as k:
            create(kube, [placed, elsewhere, port])
            bound = wait_for(
                lambda: (
                    kube.request("GET", f"/api/v1/namespaces/{ns}/pods/placed").json()["spec"].get("nodeName")
                ),
                30,
            )
            assert bound == name, k.output()
            total = len(kube.request("GET", "/api/v1/nodes").json()["items"])
            others = total - 1
            want = {
                "elsewhere": f"0/{total} nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
                f"{others} node(s) didn't match scheduler-enforced node affinity.",
                "port": f"0/{total} nodes are available: 1 node(s) didn't have free ports for the requested pod "
                f"ports, {others} node(s) didn't match scheduler-enforced node affinity.",
            }
            for pod, message in want.items():

                def failed(pod: str = pod) -> list[dict[str, object]]:
                    return events_for(kube, ns, pod, "FailedScheduling")

                events = wait_for(failed, 30)
                assert events, k.output()
                assert events[0]["note"].startswith(message), (pod, events[0]["note"])
    finally:
        kube.request("DELETE", f"/api/v1/nodes/{name}")
