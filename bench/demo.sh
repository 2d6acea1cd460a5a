#!/usr/bin/env bash
# ksched's main job end to end: build what is missing, start a local real
# control plane (etcd, kube-apiserver, KWOK with 1,000 fake nodes,
# kube-scheduler), run `ksched run`, create 2,000 pods, print where they went,
# the failures with their reasons and the throughput, run the same workload
# through kube-scheduler for a side-by-side, and tear everything down.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/setup_env.sh
export KSCHED_CLUSTER_DIR="${KSCHED_CLUSTER_DIR:-$(mktemp -d)/cluster}"
ksched demo --nodes "${NODES:-1000}" --pods "${PODS:-2000}" --compare
