#!/usr/bin/env bash
# Times the import in a running process against Python's pickle.loads in a
# running interpreter: the decoding work alone on both sides, without either
# process's start (fragsim's is 17-23 ms on the development VM, Python's
# about 15 ms). Rounds alternate the two, so that other load on the machine
# hits both alike; each round is K operations (default 5) of each, and the
# figures are the best and the median of the rounds' averages.
#
#   pickle_s  pickle.loads of the bytes already in memory, K times in one
#             interpreter (the result freed between loads)
#   load_x    the import against pickle.load of the file (open, read and
#             load: what the target names), in the same interpreter, each
#             load after a pickle.loads; best/best and median/median
#   import_s  pytorch.ImportFile (what `fragsim import` runs: the input
#             mapped, the trace written to a file), K times in one process
#
# usage: bench/import/inproc.sh SNAPSHOT.pickle ...
#   ROUNDS (default 7), K (default 5), TESTBIN (a `go test -c` binary of
#   ./trace/pytorch; built into a temporary directory when unset), and
#   OLD_TESTBIN: another such binary (an older commit's), timed in the
#   same rounds, after or before TESTBIN in turn; its figures come first.
set -euo pipefail
rounds=${ROUNDS:-7} k=${K:-5}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fragsim-inproc.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
bin=${TESTBIN:-}
if [ -z "$bin" ]; then
	bin=$tmp/pytorch.test
	(cd "$(dirname "$0")/../.." && CGO_ENABLED=0 go test -c -o "$bin" ./trace/pytorch/)
fi
old=${OLD_TESTBIN:-}
printf '%-24s %8s %20s %20s %8s %8s %15s' file MB "pickle_s best/med" "import_s best/med" best_x med_x "load_x best/med"
[ -z "$old" ] || printf ' %20s %8s %8s' "old_s best/med" old_x old_med_x
echo
for f in "$@"; do
	f=$(realpath "$f")
	for r in $(seq "$rounds"); do
		python3 - "$f" "$k" "$tmp/file" >>"$tmp/py" <<'PY'
import gc, pickle, sys, time
data = open(sys.argv[1], "rb").read()
ts, fs = [], []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    s = pickle.loads(data)
    ts.append(time.perf_counter() - t)
    del s
    gc.collect()
    t = time.perf_counter()
    with open(sys.argv[1], "rb") as fh:
        s = pickle.load(fh)
    fs.append(time.perf_counter() - t)
    del s
    gc.collect()
print("%.4f" % (sum(ts) / len(ts)))
with open(sys.argv[3], "a") as out:
    print("%.4f" % (sum(fs) / len(fs)), file=out)
PY
		run() {
			FRAGSIM_BENCH_SNAPSHOT=$f "$1" -test.run '^$' -test.bench 'BenchmarkImportFile$' -test.benchtime "${k}x" |
				awk '/^BenchmarkImportFile/ { printf "%.4f\n", $3 / 1e9 }' >>"$2"
		}
		if [ -n "$old" ] && [ $((r % 2)) = 0 ]; then
			run "$old" "$tmp/old"
		fi
		run "$bin" "$tmp/go"
		if [ -n "$old" ] && [ $((r % 2)) = 1 ]; then
			run "$old" "$tmp/old"
		fi
	done
	best() { sort -g "$1" | head -1; }
	median() { sort -g "$1" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
	pb=$(best "$tmp/py") pm=$(median "$tmp/py") gb=$(best "$tmp/go") gm=$(median "$tmp/go")
	fb=$(best "$tmp/file") fm=$(median "$tmp/file")
	printf '%-24s %8.1f %9.4f/%-10.4f %9.4f/%-10.4f %7.1fx %7.1fx %7.1f/%-6.1fx' "$(basename "$f")" \
		"$(awk -v s="$(stat -c %s "$f")" 'BEGIN { print s / 1048576 }')" "$pb" "$pm" "$gb" "$gm" \
		"$(awk -v a="$pb" -v b="$gb" 'BEGIN { print a / b }')" "$(awk -v a="$pm" -v b="$gm" 'BEGIN { print a / b }')" \
		"$(awk -v a="$fb" -v b="$gb" 'BEGIN { print a / b }')" "$(awk -v a="$fm" -v b="$gm" 'BEGIN { print a / b }')"
	if [ -n "$old" ]; then
		ob=$(best "$tmp/old") om=$(median "$tmp/old")
		printf ' %9.4f/%-10.4f %7.1fx %7.1fx' "$ob" "$om" \
			"$(awk -v a="$pb" -v b="$ob" 'BEGIN { print a / b }')" "$(awk -v a="$pm" -v b="$om" 'BEGIN { print a / b }')"
	fi
	echo
	rm -f "$tmp/py" "$tmp/go" "$tmp/old" "$tmp/file"
done
