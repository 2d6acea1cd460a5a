"""``ksched bench --chaos``: a soak of two leader-elected ksched replicas under overlapping faults.

A local control plane of its own (etcd, kube-apiserver with an audit log of
bindings and Lease writes, kube-controller-manager's workload controllers,
kube-scheduler for pods the webhook leaves to it, KWOK nodes, a real
Prometheus scraping an in-process exporter) runs two ``ksched run`` replicas
with leader election and the mutating webhook. Pods arrive at a steady rate
(bare, Deployment-owned, gangs, affinity, preemptors on a tainted pool, pods
routed by the webhook; every pod scored by a live Prometheus metric) while
faults are injected on a schedule drawn from the seed, overlapping: leader
SIGKILL, leader SIGSTOP past its lease then SIGCONT, kube-apiserver and etcd
restarts, Prometheus stopped / hung / restarted, etcd compaction with an API
server restart (watches answered 410, relists), nodes deleted / added /
cordoned / tainted NoExecute, pods deleted while their bind is in flight,
PodGroups deleted mid-gang.

At the end the invariants are read from the API server's own state and its
audit log: every pod bound or pending with a FailedScheduling event; no node
over-committed and no placement constraint broken (:mod:`ksched.bench.invariants`);
no bind by a replica that did not hold the Lease when the API server received it;
no gang partly bound; no preemption victim whose preemptor is neither bound nor
nominated; both replicas running.

Modules: :mod:`~.figures` (names, limits, figures, rendering), :mod:`~.replicas`,
:mod:`~.audit`, :mod:`~.soak` (state, set-up, arrivals), :mod:`~.faults`,
:mod:`~.check` and :mod:`~.run` (:func:`~.run.run_chaos`, the entry).
"""
