"""Steering: the leader marks hot nodes with a ``PreferNoSchedule`` taint so that other
schedulers (kube-scheduler's TaintToleration) prefer other nodes. ``marks.py`` decides which
(hysteresis and the cap), ``controller.py`` writes them and reports them."""
