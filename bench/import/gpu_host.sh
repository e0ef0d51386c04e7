#!/usr/bin/env bash
# The import's figures in one call on a machine with a GPU, torch and
# transformers (the H200 host), where Go is not installed: the binaries are
# built beforehand and travel in build/.
#
#   1. records the runs of the README's recipe (`context="all"`: Python call
#      stacks on every entry) with traces/workloads: multi_agent, train and
#      kv_decode, seed 1, three at a time on the GPU;
#   2. writes genpickle's synthetic snapshots of 100K and 1M entries with
#      8-frame stacks (the default inputs of run.sh);
#   3. unpacks the real snapshots of trace/pytorch/testdata/real;
#   4. runs inproc.sh (in process) and whole_command.py (the whole command) on all of
#      them, with the old binaries in the same rounds when they are there.
#
# usage: bench/import/gpu_host.sh OUTDIR
#   build/fragsim, build/pytorch.test (`go test -c ./trace/pytorch`) and
#   build/genpickle (./bench/import/genpickle), all CGO_ENABLED=0; and for
#   an A/B, build/fragsim_old and build/pytorch_old.test of another commit.
#   RUNS (default 11) runs of the command, ROUNDS (5) and K (5) in process.
set -uo pipefail
out=${1:?usage: gpu_host.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
snap=$(mktemp -d "${TMPDIR:-/tmp}/fragsim-h200.XXXXXX")
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# (Which commit the binaries are is for the caller to note: the checkout's
# git HEAD there need not be the one they were built from.)
echo "# $(date -u +%FT%TZ), $(nproc) cores, $(python3 -c 'import sys; print(sys.version.split()[0])')," \
	"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" | tee "$out/host.txt"

# 1. The recipe's runs.
for spec in "multi_agent|multi_agent.py --seed 1" "train|train.py --seed 1" "kv_decode|kv_decode.py --seed 1"; do
	name=${spec%%|*} cmd=${spec#*|}
	(cd "$root/traces/workloads" && timeout 300 python3 $cmd --context all --snapshot "$snap/$name.pickle" \
		>"$out/record_$name.log" 2>&1 || echo "FAILED recording $name (record_$name.log)") &
done
# 2. Synthetic snapshots, meanwhile.
"$root/build/genpickle" -o "$snap/gp100k.pickle" -n 100000 -frames 8
"$root/build/genpickle" -o "$snap/gp1m.pickle" -n 1000000 -frames 8
# 3. The real snapshots kept in the tree.
for f in "$root"/trace/pytorch/testdata/real/*.pickle.gz; do
	case $f in */stacks.pickle.gz) continue ;; esac # 48 KiB: a test input
	gzip -dc "$f" >"$snap/$(basename "$f" .gz)"
done
wait
ls -l "$snap" | tee -a "$out/host.txt"
small=(fraction_retry ring stacks_agents empty_cache expandable_empty gc_threshold streams baseline_s1)
big=(train multi_agent kv_decode gp100k gp1m)
files=()
for n in "${small[@]}" "${big[@]}"; do [ -s "$snap/$n.pickle" ] && files+=("$snap/$n.pickle"); done

# 4. In process, then the whole command.
old=()
[ -x "$root/build/pytorch_old.test" ] && old=(OLD_TESTBIN="$root/build/pytorch_old.test")
env "${old[@]}" TESTBIN="$root/build/pytorch.test" ROUNDS=${ROUNDS:-5} K=${K:-5} \
	bash "$here/inproc.sh" "${files[@]}" 2>&1 | tee "$out/inproc.txt"
bins=()
[ -x "$root/build/fragsim_old" ] && bins+=(old="$root/build/fragsim_old")
bins+=(new="$root/build/fragsim")
python3 "$here/whole_command.py" "${RUNS:-11}" "${bins[@]}" -- "${files[@]}" 2>&1 | tee "$out/whole_command.txt"
rm -rf "$snap"
