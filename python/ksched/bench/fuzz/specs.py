"""The valid pods the fuzzer starts from: one per shape of spec it mutates."""

from __future__ import annotations

from ksched.bench.fuzz.report import NAMESPACE
from ksched.objects import Obj


def container(name: str, cpu: str = "100m", memory: str = "64Mi") -> Obj:
    return {"name": name, "image": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}


def base_pod(i: int) -> Obj:
    """One of six valid pods (by ``i``): plain; node affinity; tolerations, ports and
    priority class-free limits; topology spread and anti-affinity; init containers,
    volumes and extended resources; pod affinity and pod-level resources."""
    app = f"fuzz-{i % 7}"
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"fuzz-{i}", "namespace": NAMESPACE, "labels": {"app": app, "tier": "t"}},
        "spec": {"schedulerName": "ksched", "containers": [container("app")]},
    }
    spec = pod["spec"]
    zone = "topology.kubernetes.io/zone"
    kind = i % 6
    if kind == 1:
        spec["nodeSelector"] = {"kubernetes.io/os": "linux"}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": zone, "operator": "In", "values": ["local-1a", "local-1b"]}
                            ]
                        }
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "preference": {
                            "matchExpressions": [
                                {"key": "node.kubernetes.io/instance-type", "operator": "Exists"}
                            ]
                        },
                    }
                ],
            }
        }
    elif kind == 2:
        spec["tolerations"] = [
            {"key": "dedicated", "operator": "Equal", "value": "fuzz", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 30,
            },
        ]
        spec["containers"][0]["ports"] = [
            {"name": "http", "containerPort": 8080, "hostPort": 20000 + i % 5000}
        ]
        spec["containers"][0]["resources"]["limits"] = {"cpu": "200m", "memory": "128Mi"}
    elif kind == 3:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": zone,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": app}},
            }
        ]
        spec["affinity"] = {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 50,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {
                                "matchExpressions": [{"key": "app", "operator": "In", "values": [app]}]
                            },
                        },
                    }
                ]
            }
        }
    elif kind == 4:
        spec["initContainers"] = [container("init", "300m", "32Mi")]
        spec["containers"].append(container("sidecar", "50m", "16Mi"))
        spec["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "1Gi"
        spec["containers"][0]["resources"]["requests"]["example.com/widget"] = "1"
        spec["containers"][0]["resources"]["limits"] = {"example.com/widget": "1"}
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    elif kind == 5:
        spec["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": zone, "labelSelector": {"matchLabels": {"tier": "t"}}}
                ]
            }
        }
        spec["resources"] = {"requests": {"cpu": "300m", "memory": "128Mi"}}
    return pod
