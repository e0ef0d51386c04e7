#!/usr/bin/env bash
# Monitors the shared-GPU scenario of silent_oom.py live: a blocker leaves
# 3.3 GiB, then 40 GiB, to two servers, each running fragsim.monitor (every
# second, log=...) while it serves for 45 s; then prints the JSON summary of
# monitor_summary.py: whether the silent-OOM risk gauge turned on before the
# first failed request (3.3 GiB), and never (40 GiB). About 3 minutes on an
# H200 with torch 2.11 and transformers.
# Needs the fragsim wheel installed (python3 python/build_wheel.py -o dist/;
# pip install dist/fragsim-*.whl).
# Usage: monitor_cohost.sh OUTDIR
set -u
out=${1:?usage: monitor_cohost.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(realpath "$out")
export PYTHONUNBUFFERED=1
cd "$here"
python3 -c 'import fragsim, shutil; assert shutil.which("fragsim") or fragsim.find_fragsim_bin()' 2>/dev/null ||
  { echo "monitor_cohost.sh: the fragsim wheel is not installed (pip install dist/fragsim-*.whl)" >&2; exit 2; }

scenario() { # NAME LEAVE_GIB
  local name=$1 leave=$2
  rm -f "$out/${name}"_*
  python3 silent_oom.py --role blocker --leave "$leave" --seconds 90 >"$out/${name}_blocker.log" 2>&1 &
  local b=$!
  # the blocker prints its line once it holds the memory
  for _ in $(seq 120); do grep -q '"role": "blocker"' "$out/${name}_blocker.log" 2>/dev/null && break; sleep 0.5; done
  local pids=()
  for s in 1 2; do
    timeout 150 python3 silent_oom.py --role server --seed $s --seconds 45 \
      --monitor "$out/${name}_p$s.metrics.jsonl" --monitor-interval 1 \
      --stats-out "$out/${name}_p$s.json" >"$out/${name}_p$s.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  kill $b 2>/dev/null; wait $b 2>/dev/null
}
scenario leave3.3 3.3
scenario leave40 40.0
python3 monitor_summary.py "$out"
