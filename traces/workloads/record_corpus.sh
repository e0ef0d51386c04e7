#!/usr/bin/env bash
# Records the conformance corpus (conformance.py) on a GPU: every case as a
# PyTorch snapshot under its own PYTORCH_CUDA_ALLOC_CONF, and every case that
# is not a what-if also live, with `fragsim record` under the same setting.
# Eight runs at a time; the snapshots are gzip'd.
# Usage: record_corpus.sh OUTDIR [CASE...]   (FRAGSIM=path/to/fragsim, default build/fragsim)
# With CASEs, only those cases are recorded.
set -u
out=${1:?usage: record_corpus.sh OUTDIR [CASE...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
fragsim=$(cd "$here/../.." && realpath "${FRAGSIM:-build/fragsim}")
mkdir -p "$out/snap" "$out/live" "$out/stats" "$out/log"
out=$(realpath "$out")
export PYTHONUNBUFFERED=1
python3 "$here/conformance.py" --list >"$out/cases.jsonl"

one() { # NAME CONF WHATIF
  local name=$1 conf=$2 whatif=$3
  ( cd "$here" && PYTORCH_CUDA_ALLOC_CONF="$conf" timeout 300 python3 conformance.py --case "$name" \
      --snapshot "$out/snap/$name.pickle" --stats-out "$out/stats/$name.json" ) \
      >"$out/log/$name.log" 2>&1 || echo "FAILED snapshot $name"
  if [ "$whatif" = no ]; then
    ( cd "$here" && PYTORCH_CUDA_ALLOC_CONF="$conf" timeout 300 "$fragsim" record -o "$out/live/$name.live.fst" \
        --tag "workload=conformance.py --case $name" -- python3 conformance.py --case "$name" \
        --stats-out "$out/stats/$name.live.json" ) >"$out/log/$name.live.log" 2>&1 || echo "FAILED live $name"
  fi
}
export -f one
export here out fragsim
python3 - "$out/cases.jsonl" "$@" <<'PY' | xargs -P 8 -n 3 bash -c 'one "$0" "$1" "$2"'
import json, sys
only = set(sys.argv[2:])
for line in open(sys.argv[1]):
    c = json.loads(line)
    if only and c["name"] not in only:
        continue
    print(c["name"], repr(c["conf"]) if c["conf"] else "''", "yes" if c.get("whatif_of") else "no")
PY
gzip -6 "$out"/snap/*.pickle
echo "corpus: $(ls "$out/snap" | wc -l) snapshots, $(ls "$out/live" | wc -l) live"
