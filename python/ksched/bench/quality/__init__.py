"""``ksched bench --quality``: hot nodes under real load, ksched beside kube-scheduler.

:mod:`.scenarios` makes the seeded pods and their usage, :mod:`.run` drives each scheduler
through them on a local control plane with the load simulation, :mod:`.figures` judges the
node utilisation Prometheus recorded, :mod:`.report` writes the table, JSON and plot.
"""
