#!/usr/bin/env bash
# Overhead of fragsim record on a GPU (median of RUNS alternating runs under
# the native allocator and under fragsim record), then a PyTorch snapshot of
# the same seeded workload and a recording, compared request by request.
# Extra arguments go to the workload (e.g. --steps 200 --no-hf).
#   FRAGSIM=build/fragsim FRAGSIM_HOOK_LIB=build/libfragsim_hook.so OUT=/tmp/x RUNS=5 bench/record/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
FRAGSIM=${FRAGSIM:-build/fragsim}
LIB=${FRAGSIM_HOOK_LIB:-build/libfragsim_hook.so}
OUT=${OUT:-/tmp/fragsim-overhead}
RUNS=${RUNS:-5}
ARMS=${ARMS:-native,record}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
"$FRAGSIM" probe || true
"$PY" bench/record/overhead.py --runs "$RUNS" --arms "$ARMS" --fragsim "$FRAGSIM" --lib "$LIB" --out "$OUT" "$@" | tee "$OUT/overhead.txt"
"$PY" bench/record/overhead.py --snapshot "$OUT/snapshot.pickle" "$@"
"$FRAGSIM" record -o "$OUT/recorded.fst" --lib "$LIB" -- "$PY" bench/record/overhead.py --workload "$@" >/dev/null
"$PY" bench/record/compare.py --fragsim "$FRAGSIM" "$OUT/recorded.fst" "$OUT/snapshot.pickle" | tee "$OUT/compare.txt"
