#!/usr/bin/env bash
# Read-only check of basalt-nodeagent against real NVML on a GPU machine. It changes no GPU
# state: discovery, an offline MIG plan, a fixture round trip, and one reconcile round that
# publishes the NodeTopology to a local in-memory API server (no MIG or time-slicing label is
# set, so nothing is partitioned). Usage: BIN=target/release OUT=/tmp/out real-gpu-check.sh
set -uo pipefail
BIN=${BIN:-target/release}
OUT=${OUT:-/tmp/basalt-gpu-check}
NODE=${NODE:-gpu-node}
mkdir -p "$OUT"
{
  nvidia-smi -L
  nvidia-smi --query-gpu=index,name,memory.total,mig.mode.current,driver_version,pci.bus_id --format=csv
  nvidia-smi topo -m
  nvidia-smi nvlink -s
} >"$OUT/nvidia-smi.txt" 2>&1

step() { echo "== $1: rc=$2"; }
"$BIN/basalt-nodeagent" discover --raw >"$OUT/raw.yaml" 2>"$OUT/stderr.txt"; step "discover --raw" $?
"$BIN/basalt-nodeagent" discover --node-name "$NODE" --output yaml >"$OUT/topology.yaml" 2>>"$OUT/stderr.txt"; step "discover" $?
"$BIN/basalt-nodeagent" discover --fake "$OUT/raw.yaml" --node-name "$NODE" --output yaml >"$OUT/topology-from-fixture.yaml" 2>>"$OUT/stderr.txt"; step "discover --fake raw.yaml" $?
cmp -s "$OUT/topology.yaml" "$OUT/topology-from-fixture.yaml" && echo "fixture round trip: identical" || echo "fixture round trip: DIFFERENT"
model=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$model" in
  *H200*) m=H200-141GB; p=3g.71gb=1,2g.35gb=1,1g.18gb=2 ;;
  *H100*) m=H100-80GB; p=3g.40gb=1,2g.20gb=1,1g.10gb=2 ;;
  *) m=""; p="" ;;
esac
if [ -n "$m" ]; then
  "$BIN/basalt-nodeagent" mig-plan --model "$m" --profiles "$p" >"$OUT/mig-plan.txt" 2>&1; step "mig-plan $m $p" $?
fi

# One reconcile round against a local in-memory API server.
"$BIN/basalt-sim" apiserver --listen 127.0.0.1:18080 --write-kubeconfig "$OUT/kubeconfig" >"$OUT/apiserver.log" 2>&1 &
api=$!
for _ in $(seq 50); do [ -s "$OUT/kubeconfig" ] && break; sleep 0.1; done
curl -s -X POST -H 'Content-Type: application/json' http://127.0.0.1:18080/api/v1/nodes \
  -d "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$NODE\"}}" >/dev/null
KUBECONFIG="$OUT/kubeconfig" "$BIN/basalt-nodeagent" run --node-name "$NODE" --once --listen 127.0.0.1:19400 >"$OUT/run-once.json" 2>>"$OUT/stderr.txt"; step "run --once" $?
curl -s "http://127.0.0.1:18080/apis/scheduling.basalt.dev/v1alpha1/nodetopologies/$NODE" >"$OUT/published.json"
curl -s "http://127.0.0.1:18080/api/v1/nodes/$NODE" >"$OUT/node.json"
kill "$api" 2>/dev/null
echo "== published NodeTopology"; head -c 3000 "$OUT/published.json"; echo
echo "== stderr"; tail -n 20 "$OUT/stderr.txt"
