"""``ksched bench --cluster``: a null binder, kube-scheduler and ksched side by side on a real API server.

One run brings up the local control plane (:mod:`ksched.cluster.local`) with N
KWOK nodes and, when the metrics workload is asked for, a real Prometheus
scraping an exporter of two per-node gauges served from this process. Then,
for each scheduler and each workload, in its own namespace:

1. the scheduler is started and waited for (ready), then paused (SIGSTOP);
2. *backlog*: the workload's pods are created, the scheduler resumed (SIGCONT)
   and timed from then to its last bind (pods/s) and to its last write, bind
   or ``Scheduled`` event (pods/s with events: what the null binder's rate
   measures, so the ratio to it is taken on this one), with its CPU time
   (utime + stime from /proc) to its last write per bound pod;
3. the pods are deleted; *steady*: pods are created at a fixed rate and each
   pod's create→bind latency is taken (p50, p99);
4. every bound pod of the cluster is checked by :mod:`ksched.bench.invariants`:
   over-committed nodes in any resource, and broken nodeSelector, required node
   affinity, required anti-affinity and DoNotSchedule spread constraints;
5. its peak RSS (VmHWM) is read, it is stopped and the pods are deleted.

The schedulers: a null binder (a small Go program built with the control
plane, :mod:`ksched.cluster.build`: it binds round-robin and posts the
``Scheduled`` event, nothing else: the API server's ceiling), kube-scheduler
(QPS 5000, its default percentageOfNodesToScore) and ``ksched run`` (this
checkout, and any other ksched command given with ``--ksched LABEL=COMMAND``,
say an older build's, for before/after figures in one run).

Binds and ``Scheduled`` events are seen through two watches of the namespace
from this process; times are taken on receipt. Results: a JSON document, a
table, and a PNG chart of bound pods over time in each backlog drain.

With ``--existing-pods N`` the cluster is first filled with N bound pods and each
scheduler is started once and taken through start-up, a forced relist, a drain, a
rolling update and steady arrivals, with a census of every pod after each phase
(:mod:`ksched.bench.sidebyside.existing`). ``--cpu-hog CORES`` keeps that many cores
busy through either mode's phases (:mod:`ksched.bench.sidebyside.hog`).

"""
