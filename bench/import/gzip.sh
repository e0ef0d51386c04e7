#!/bin/bash
# gzip.sh: a gzip'd snapshot's import against Python's pickle.load(gzip.open(f))
# and against the same snapshot's un-gzipped import. The gzip'd import is run
# both ways, each forced with importfile's -stream-from (the pickle size from
# which the import streams, pytorch.Options.StreamFromBytes; 32 MiB by
# default): decoded while it decompresses ("gzip-stream") and decompressed
# whole first, for the decoder's workers ("gzip-whole"). Every import runs
# bench/import/importfile, which does what `fragsim import -q` does.
#
# usage: bench/import/gzip.sh [IMPORTFILE] [ENTRIES] [ROUNDS]
# (defaults: a fresh build, 1000000 entries, 5 rounds). The runs are
# interleaved (Python, gzip'd both ways, plain) so that a loaded machine
# slows all alike; it prints each run's wall time and max RSS (/usr/bin/time
# -v), their medians, and for each way the two ratios the targets are about:
# Python's time / the gzip'd import's (target >= 2.5), and the gzip'd
# import's max RSS / the plain import's (target <= 1.5). It also prints
# the CPU time (user + system) of each: on a machine loaded by other work,
# the wall times measure the load as much as the programs.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bin=${1:-}
if [ -z "$bin" ]; then
	bin=$dir/importfile
	go build -o "$bin" ./bench/import/importfile
fi
n=${2:-1000000}
rounds=${3:-5}
go run ./bench/import/genpickle -o "$dir/s.pickle" -n "$n" >/dev/null
gzip -k -6 "$dir/s.pickle"
echo "snapshot: $n entries, pickle $(stat -c %s "$dir/s.pickle") bytes, gzip'd $(stat -c %s "$dir/s.pickle.gz") bytes"

# run LABEL CMD...: appends "seconds kilobytes" to $dir/LABEL
run() {
	local label=$1
	shift
	/usr/bin/time -v "$@" >/dev/null 2>"$dir/time.txt"
	local s kb cpu
	cpu=$(awk -F': ' '/User time|System time/ {t+=$2} END {print t}' "$dir/time.txt")
	s=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); t=0; for(i=1;i<=n;i++) t=t*60+a[i]; print t}' "$dir/time.txt")
	kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir/time.txt")
	echo "$s $kb $cpu" >>"$dir/$label"
	echo "  $label: $s s, $kb KB, CPU $cpu s"
}
for r in $(seq "$rounds"); do
	echo "round $r"
	run python python3 -c "import pickle,gzip,sys; pickle.load(gzip.open(sys.argv[1]))" "$dir/s.pickle.gz"
	run gzip-stream "$bin" -stream-from 1 "$dir/s.pickle.gz" "$dir/g.fst"
	run gzip-whole "$bin" -stream-from $((1 << 62)) "$dir/s.pickle.gz" "$dir/w.fst"
	run plain "$bin" "$dir/s.pickle" "$dir/p.fst"
done
cmp "$dir/g.fst" "$dir/p.fst"
cmp "$dir/w.fst" "$dir/p.fst"
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
for l in python gzip-stream gzip-whole plain; do
	printf '%s: median %s s, max RSS median %s KB, CPU median %s s\n' "$l" "$(cut -d' ' -f1 "$dir/$l" | median)" \
		"$(cut -d' ' -f2 "$dir/$l" | median)" "$(cut -d' ' -f3 "$dir/$l" | median)"
done
py=$(cut -d' ' -f1 "$dir/python" | median)
pr=$(cut -d' ' -f2 "$dir/plain" | median)
for l in gzip-stream gzip-whole; do
	gz=$(cut -d' ' -f1 "$dir/$l" | median)
	gr=$(cut -d' ' -f2 "$dir/$l" | median)
	awk -v l="$l" -v py="$py" -v gz="$gz" -v gr="$gr" -v pr="$pr" 'BEGIN {
		printf "%s: speed-up over Python: %.2fx (target >= 2.5)\n", l, py/gz
		printf "%s: max RSS / plain: %.2fx (target <= 1.5)\n", l, gr/pr }'
done
