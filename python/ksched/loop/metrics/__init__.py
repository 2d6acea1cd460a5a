"""Metrics: the live values of each node, and the load model that builds the engine's values.

:mod:`~ksched.loop.metrics.metric_sources` refreshes each live metric in the background
(Prometheus, :mod:`~ksched.loop.metrics.metrics_server`, node annotations) into samples
(:mod:`~ksched.loop.metrics.samples`); :mod:`~ksched.loop.metrics.recent_pods` adds what a
sample cannot show yet of recently bound pods; :mod:`~ksched.loop.metrics.load_model` builds
from them, once for every caller, the values placing and moving read. Imports no other
sub-package of the loop: the load rebalancing holds comes in through the load model's
:class:`~ksched.loop.metrics.load_model.HeldLoad`.
"""
