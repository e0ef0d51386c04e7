#!/usr/bin/env bash
# Records the serving workloads on a GPU: CUDA-graph serving (graphs.py) as
# snapshots under the default setting and expandable_segments:True, with a
# MemPool, and with graphs freed and captured again, plus one live recording;
# Llama-style agents answering with generate() (llama_generate.py) under the
# default setting, max_split_size_mb with roundup divisions, and expandable
# segments, plus one live recording; then the shared-GPU scenario (silent_oom.py): a blocker and two servers, with
# 40, 4 and 3.3 GiB left to the servers.
# Usage: record_serving.sh OUTDIR   (FRAGSIM=path/to/fragsim, default build/fragsim)
set -u
out=${1:?usage: record_serving.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
fragsim=$(cd "$here/../.." && realpath "${FRAGSIM:-build/fragsim}")
mkdir -p "$out/snap" "$out/live" "$out/stats" "$out/log"
out=$(realpath "$out")
export PYTHONUNBUFFERED=1
cd "$here"

graph() { # NAME CONF ARGS...
  local name=$1 conf=$2; shift 2
  PYTORCH_CUDA_ALLOC_CONF="$conf" timeout 240 python3 graphs.py --seed 1 "$@" \
    --snapshot "$out/snap/$name.pickle" --stats-out "$out/stats/$name.json" >"$out/log/$name.log" 2>&1 \
    || echo "FAILED $name"
}
graph graphs_s1 "" &
graph graphs_expandable_s1 "expandable_segments:True" &
graph graphs_mempool_s1 "" --mempool &
graph graphs_recapture_s1 "" --recapture &
graph graphs_mempool_expandable_s1 "expandable_segments:True" --mempool &
graph graphs_recapture_expandable_s1 "expandable_segments:True" --recapture &
timeout 240 "$fragsim" record -o "$out/live/graphs_s1.live.fst" --tag "workload=graphs.py --seed 1" -- \
  python3 graphs.py --seed 1 --stats-out "$out/stats/graphs_s1.live.json" >"$out/log/graphs_s1.live.log" 2>&1 \
  || echo "FAILED graphs_s1 live"
wait

llama() { # NAME CONF
  PYTORCH_CUDA_ALLOC_CONF="$2" timeout 300 python3 llama_generate.py --seed 1 --requests 12 \
    --snapshot "$out/snap/$1.pickle" --stats-out "$out/stats/$1.json" >"$out/log/$1.log" 2>&1 || echo "FAILED $1"
}
llama llama_generate_s1 "" &
llama llama_generate_maxsplit_s1 "max_split_size_mb:64,roundup_power2_divisions:4" &
llama llama_generate_expandable_s1 "expandable_segments:True" &
timeout 300 "$fragsim" record -o "$out/live/llama_generate_s1.live.fst" --tag "workload=llama_generate.py --seed 1 --requests 12" -- \
  python3 llama_generate.py --seed 1 --requests 12 --stats-out "$out/stats/llama_generate_s1.live.json" \
  >"$out/log/llama_generate_s1.live.log" 2>&1 || echo "FAILED llama_generate_s1 live"
wait

scenario() { # NAME LEAVE_GIB
  local name=$1 leave=$2
  python3 silent_oom.py --role blocker --leave "$leave" --seconds 70 >"$out/log/${name}_blocker.log" 2>&1 &
  local b=$!
  sleep 12   # the blocker's CUDA start and its allocation
  local pids=()
  for s in 1 2; do
    timeout 120 python3 silent_oom.py --role server --seed $s --seconds 45 \
      --snapshot "$out/snap/${name}_p$s.pickle" --memlog "$out/stats/${name}_p$s.memlog" \
      --stats-out "$out/stats/${name}_p$s.json" >"$out/log/${name}_p$s.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  kill $b 2>/dev/null; wait $b 2>/dev/null
}
scenario cohost_leave40 40.0
scenario cohost_leave4 4.0
scenario cohost_leave3.3 3.3
gzip -6 "$out"/snap/*.pickle
echo "serving: $(ls "$out/snap" | wc -l) snapshots, $(ls "$out/live" | wc -l) live"
