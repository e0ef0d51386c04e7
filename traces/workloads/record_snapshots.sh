#!/usr/bin/env bash
# Records every workload on a GPU as PyTorch memory snapshots, then times each
# workload under the native allocator and under expandable_segments:True.
# Usage: record_snapshots.sh OUTDIR   (run from anywhere; needs torch + transformers)
set -u
out=${1:?usage: record_snapshots.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/snap" "$out/stats" "$out/log"
export PYTHONUNBUFFERED=1
fr_retry=0.00966   # ~1.45 GB cap on a 150,109,880,320-byte H200: forces release-and-retry
fr_gc=0.0107       # ~1.6 GB cap for garbage_collection_threshold

# name | PYTORCH_CUDA_ALLOC_CONF | script and args
runs=(
"baseline_s1||multi_agent.py --seed 1"
"baseline_s2||multi_agent.py --seed 2"
"baseline_s3||multi_agent.py --seed 3"
"shared_s1||multi_agent.py --seed 1 --shared"
"kv_decode_s1||kv_decode.py --seed 1"
"train_s1||train.py --seed 1"
"streams||multi_agent.py --seed 4 --agents 3 --steps 150 --streams"
"empty_cache||multi_agent.py --seed 5 --agents 3 --steps 100 --empty-cache-every 1"
"fraction_retry||multi_agent.py --seed 6 --agents 3 --steps 150 --fraction $fr_retry"
"gc_threshold|garbage_collection_threshold:0.6|multi_agent.py --seed 7 --agents 3 --steps 150 --fraction $fr_gc"
"maxsplit_pow2|max_split_size_mb:64,roundup_power2_divisions:4|multi_agent.py --seed 8 --steps 150"
"maxsplit_list|max_split_size_mb:128,roundup_power2_divisions:[1:4,8:2,32:1,>:8]|multi_agent.py --seed 9 --steps 150"
"expandable|expandable_segments:True|multi_agent.py --seed 10 --steps 150"
"expandable_empty|expandable_segments:True|multi_agent.py --seed 11 --agents 3 --steps 120 --empty-cache-every 3"
"expandable_fraction|expandable_segments:True|multi_agent.py --seed 12 --agents 3 --steps 150 --fraction $fr_retry"
"ring|           |multi_agent.py --seed 13 --steps 150 --max-entries 30000"
"stacks_agents||multi_agent.py --seed 14 --agents 3 --steps 40 --context all"
)

run_one() {
  local spec=$1 name conf cmd
  name=${spec%%|*}; rest=${spec#*|}; conf=${rest%%|*}; cmd=${rest#*|}
  conf=$(echo "$conf" | xargs)
  ( cd "$here" && PYTORCH_CUDA_ALLOC_CONF="$conf" timeout 240 python3 $cmd \
      --snapshot "$out/snap/$name.pickle" --stats-out "$out/stats/snap_$name.json" \
      >"$out/log/snap_$name.log" 2>&1 ) || echo "FAILED snapshot $name (see log/snap_$name.log)"
}

# Phase A: snapshots, four at a time (the timings come later, one at a time).
i=0
for spec in "${runs[@]}"; do
  run_one "$spec" &
  i=$((i+1)); if [ $((i % 4)) -eq 0 ]; then wait; fi
done
wait
echo "phase A done: $(ls "$out/snap" | wc -l) snapshots"

# Phase B: wall times, one run at a time, native and expandable alternating.
timed() { # name conf args...
  local name=$1 conf=$2; shift 2
  ( cd "$here" && PYTORCH_CUDA_ALLOC_CONF="$conf" timeout 200 python3 "$@" \
      --stats-out "$out/stats/time_$name.json" >"$out/log/time_$name.log" 2>&1 ) || echo "FAILED timing $name"
}
for rep in 1 2 3; do
  timed baseline_native_r$rep "" multi_agent.py --seed 1
  timed baseline_expandable_r$rep "expandable_segments:True" multi_agent.py --seed 1
done
timed baseline_async "backend:cudaMallocAsync" multi_agent.py --seed 1
for w in "shared|multi_agent.py --seed 1 --shared" "kv_decode|kv_decode.py --seed 1" "train|train.py --seed 1"; do
  n=${w%%|*}; a=${w#*|}
  timed ${n}_native_r1 "" $a
  timed ${n}_expandable_r1 "expandable_segments:True" $a
  timed ${n}_async "backend:cudaMallocAsync" $a
done
echo "phase B done"
