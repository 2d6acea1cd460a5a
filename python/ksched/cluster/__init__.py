"""The local real control plane: binaries built from Go modules (build.py) and run on loopback
(local.py, which starts KWOK's fake nodes through kwok.py and Prometheus through prometheus.py,
and records every process in the state file of processes.py), and ksched's own container image,
built from the checkout with Docker or buildah (image/)."""
