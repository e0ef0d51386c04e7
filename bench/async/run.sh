#!/usr/bin/env bash
# Runs the seeded workloads under backend:cudaMallocAsync and under the native allocator
# (recording a snapshot), and, when a fragsim binary is at hand, replays each snapshot
# under the pooled model and compares peak reserved bytes.
# Usage: run.sh OUTDIR        (on the GPU machine; needs torch)
# Env:   SEEDS="1 2" STEPS=300 FRAGSIM=/path/to/fragsim (the replay step runs when set or
#        when fragsim is on PATH); REPLAY_ONLY=1 skips the GPU runs (replay an OUTDIR
#        copied from the GPU machine)
set -u
out=${1:?usage: run.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
seeds=${SEEDS:-1 2}
steps=${STEPS:-300}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
fail=0

# name | workload args
runs=()
for s in $seeds; do
  runs+=("encoder_s$s|--workload encoder --seed $s --steps $steps")
  runs+=("churn_s$s|--workload churn --seed $s --steps $((steps * 2))")
done
runs+=("encoder_streams_s1|--workload encoder --seed 1 --steps $steps --streams 3")
runs+=("encoder_empty_s1|--workload encoder --seed 1 --steps $steps --empty-cache-every 25")

for spec in "${runs[@]}"; do
  [ -n "${REPLAY_ONLY:-}" ] && break
  name=${spec%%|*}; args=${spec#*|}
  # One run at a time: the two measurements must not share the GPU.
  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 600 python3 "$here/workload.py" $args \
    --json "$out/$name.async.json" >"$out/$name.async.log" 2>&1 \
    || { echo "FAILED async $name (see $name.async.log)"; fail=1; }
  PYTORCH_CUDA_ALLOC_CONF= timeout 600 python3 "$here/workload.py" $args \
    --snapshot "$out/$name.native.pickle" --json "$out/$name.native.json" >"$out/$name.native.log" 2>&1 \
    || { echo "FAILED native $name (see $name.native.log)"; fail=1; }
  echo "done $name"
done

fs=${FRAGSIM:-$(command -v fragsim || true)}
if [ -n "$fs" ]; then
  for snap in "$out"/*.native.pickle; do
    [ -f "$snap" ] || continue
    name=$(basename "$snap" .native.pickle)
    "$fs" import -q -o "$out/$name.fst" "$out/$name.native.pickle" >"$out/$name.import.log" 2>&1 \
      || { echo "FAILED import $name"; fail=1; continue; }
    for pol in pooled caching ideal; do
      "$fs" replay --policy $pol --json "$out/$name.fst" >"$out/$name.replay_$pol.json" 2>"$out/$name.replay_$pol.log" \
        || { echo "FAILED replay $name $pol"; fail=1; }
    done
    # Variants of the pool model, to see which assumption the real pool follows.
    for v in "bestfit|fit_bins:0" "bins8|fit_bins:8" "remap|remap:true" "gran2|granularity_mb:2"; do
      tag=${v%%|*}; conf=${v#*|}
      "$fs" replay --policy pooled --conf "$conf" --json "$out/$name.fst" >"$out/$name.replay_pooled_$tag.json" \
        2>"$out/$name.replay_pooled_$tag.log" || { echo "FAILED replay $name pooled $conf"; fail=1; }
    done
  done
  python3 "$here/compare.py" "$out" | tee "$out/summary.txt"
else
  echo "no fragsim binary: copy $out to a machine with one and run REPLAY_ONLY=1 FRAGSIM=... $0 $out, or:"
  echo "  for each NAME: fragsim import -o OUT/NAME.fst OUT/NAME.native.pickle;"
  echo "  fragsim replay --policy pooled --json OUT/NAME.fst > OUT/NAME.replay_pooled.json;"
  echo "  python3 $here/compare.py OUT"
fi
exit $fail
