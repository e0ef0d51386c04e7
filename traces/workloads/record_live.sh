#!/usr/bin/env bash
# Records the four workloads live with `fragsim record` (the hook library as
# PyTorch's pluggable allocator), one at a time, with each run's summary
# (NAME.live.json: the loop's wall time) and log. pack_live.py then puts them
# in traces/ with the wall times in their headers.
# Usage: record_live.sh OUTDIR   (FRAGSIM=path/to/fragsim, default build/fragsim)
set -u
out=${1:?usage: record_live.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
fragsim=$(cd "$here/../.." && realpath "${FRAGSIM:-build/fragsim}")
mkdir -p "$out"
out=$(realpath "$out")
export PYTHONUNBUFFERED=1
runs=(
"baseline_s1|multi_agent.py --seed 1"
"shared_s1|multi_agent.py --seed 1 --shared"
"kv_decode_s1|kv_decode.py --seed 1"
"train_s1|train.py --seed 1"
)
for spec in "${runs[@]}"; do
  name=${spec%%|*}; cmd=${spec#*|}
  ( cd "$here" && timeout 240 "$fragsim" record -o "$out/$name.live.fst" \
      --tag "workload=$cmd" --tag "seed=${name##*_s}" -- \
      python3 $cmd --stats-out "$out/$name.live.json" ) >"$out/$name.live.log" 2>&1 \
    || echo "FAILED live $name (see $name.live.log)"
done
