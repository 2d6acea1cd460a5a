"""Real nodes beside the KWOK ones: ``ksched cluster up --real-nodes N``.

Owns, for each real node ``i``: a Linux bridge ``kschedbr<i>`` with the gateway of its pod
subnet ``10.246.<i>.0/24`` (the node's InternalIP, where its kubelet listens), its own
containerd (root, state, runc root and CNI configuration under the cluster's state
directory, its sockets under a short ``/run/ksched-<digest>``), and a kubelet (its root, pod logs and cgroup root its own); one kube-proxy for
the host; the pause image the sandboxes run (:data:`PAUSE_IMAGE`, a static binary built from
``ksched/cluster/pause/``, imported into each containerd); loading a local image into every real node
(:func:`load_image`); and :func:`teardown`, which removes all of it, on the machine and on
its network configuration, from the state file alone.

Network boundary: pods get addresses on the bridges this creates; the API server listens on
the first bridge's gateway (so pods reach it through the ``kubernetes`` Service); a
``KSCHED-ISOLATE`` chain drops anything a pod sends that is not for the pod network, the
service range or this host, and nothing is masqueraded out. Pods get a resolv.conf with no
name server. Nothing listens on or sends to the machine's own interface.

Needs root and Debian's containerd, runc and CNI plugins, which :func:`install_packages`
installs with apt-get when missing. Tested on cgroup v1 with the v2 hierarchy beside it; on a
v2-only host the kubelet's cgroup root needs its controllers delegated.

The modules, in the order ``up`` uses them: :mod:`.nodes` (what each node is, and the state
record), :mod:`.host` (packages, checks, bridges, the isolation chain, cgroup roots),
:mod:`.pause_image` (the sandbox image), :mod:`.daemons` (containerd, kubelet, kube-proxy,
and what reads them), :mod:`.teardown` (undoing all of it). Callers import from this
package, whose names are listed in ``__all__``.
"""

from __future__ import annotations

from ksched.cluster.realnode.daemons import KUBELET_JOB, load_image, scrape_configs, start
from ksched.cluster.realnode.host import check_host, host_before, install_packages, prepare_host
from ksched.cluster.realnode.nodes import (
    MAX_REAL_NODES,
    NODE_LABEL,
    POD_NETWORK,
    HostChanges,
    RealNode,
    api_address,
    from_state,
    plan,
    to_state,
)
from ksched.cluster.realnode.pause_image import PAUSE_IMAGE, pause_archive, pause_binary
from ksched.cluster.realnode.teardown import teardown

__all__ = [
    "KUBELET_JOB",
    "MAX_REAL_NODES",
    "NODE_LABEL",
    "PAUSE_IMAGE",
    "POD_NETWORK",
    "HostChanges",
    "RealNode",
    "api_address",
    "check_host",
    "from_state",
    "host_before",
    "install_packages",
    "load_image",
    "pause_archive",
    "pause_binary",
    "plan",
    "prepare_host",
    "scrape_configs",
    "start",
    "teardown",
    "to_state",
]
