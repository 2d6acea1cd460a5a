#!/usr/bin/env bash
# ksched's main job on an embedded default: schedule the shipped example
# cluster offline (simulate + explain), then measure the engine in process.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/setup_env.sh
echo "== ksched simulate examples/cluster.yaml (cheapest node by price annotation)"
ksched simulate examples/cluster.yaml --config examples/price.yaml || true
echo
echo "== ksched explain examples/cluster.yaml default/web-0"
ksched explain examples/cluster.yaml default/web-0 --config examples/price.yaml
echo
echo "== ksched bench --nodes 5000 --pods 10000"
ksched bench --nodes 5000 --pods 10000
