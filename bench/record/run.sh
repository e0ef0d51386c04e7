#!/usr/bin/env bash
# fragsim record on a GPU, end to end:
#  1. fragsim probe;
#  2. the cost of one tensor alloc+free under each allocator path (percall.py);
#  3. the overhead of recording: RUNS alternating runs of a seeded workload
#     under the native allocator, under fragsim record and under
#     backend:cudaMallocAsync (overhead.py);
#  4. a PyTorch snapshot of the same workload and one more recording,
#     compared request by request, and the recording replayed under caching
#     against the real run's peak reserved (compare.py).
# Extra arguments choose the workload in traces/workloads (default:
# multi_agent.py --seed 1, the multi-agent baseline).
#   FRAGSIM=build/fragsim OUT=/tmp/x RUNS=5 bench/record/run.sh [kv_decode.py --seed 1]
# RUNS=0 skips step 3, PERCALL=0 step 2.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
FRAGSIM=$(realpath "${FRAGSIM:-build/fragsim}")
LIB=$(realpath "${FRAGSIM_HOOK_LIB:-build/libfragsim_hook.so}")
OUT=${OUT:-/tmp/fragsim-overhead}
RUNS=${RUNS:-5}
PY=${PYTHON:-python3}
mkdir -p "$OUT"; OUT=$(realpath "$OUT")
workload=("$@"); [ ${#workload[@]} -eq 0 ] && workload=(multi_agent.py --seed 1)
"$FRAGSIM" probe | tee "$OUT/probe.txt"
[ "${PERCALL:-1}" = 0 ] || {
  "$PY" bench/record/percall.py
  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync "$PY" bench/record/percall.py
  "$FRAGSIM" record --lib "$LIB" -o "$OUT/percall.fst" -- "$PY" bench/record/percall.py
} 2>&1 | grep FRAGSIM_PERCALL | tee "$OUT/percall.txt"
"$PY" bench/record/overhead.py --runs "$RUNS" --fragsim "$FRAGSIM" --lib "$LIB" --out "$OUT" -- "${workload[@]}" \
  | tee "$OUT/overhead.txt"
name=$(basename "${workload[0]}" .py)
(cd traces/workloads && "$PY" "${workload[@]}" --snapshot "$OUT/$name.pickle" --stats-out "$OUT/$name.snapshot.json" >/dev/null)
(cd traces/workloads && "$FRAGSIM" record --lib "$LIB" -o "$OUT/$name.live.fst" -- "$PY" "${workload[@]}" >/dev/null)
"$FRAGSIM" import -q "$OUT/$name.pickle" -o "$OUT/$name.snapshot.fst" \
  --tag "real_reserved_peak=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["reserved_peak"])' "$OUT/$name.snapshot.json")"
"$PY" bench/record/compare.py --fragsim "$FRAGSIM" "$OUT/$name.live.fst" "$OUT/$name.snapshot.fst" | tee "$OUT/compare.txt"
