#!/usr/bin/env bash
# Compares two fragsim binaries' import of the same snapshots, and Python's
# pickle.loads of them, interleaved run by run so that other load on the
# machine hits all three alike; prints the best of REPEAT (default 5) wall
# seconds of each (to the millisecond: /usr/bin/time's own figure is to
# 10 ms) with the run's peak RSS and minor page faults (/usr/bin/time),
# then the median seconds of each, and checks that both binaries write
# the same trace.
#
# usage: bench/import/compare_binaries.sh OLD_FRAGSIM NEW_FRAGSIM SNAPSHOT.pickle ...
set -euo pipefail
old=$1 new=$2
shift 2
repeat=${REPEAT:-5}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fragsim-ab.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
printf '%-28s %8s %8s %19s %19s %7s %7s   %s\n' file entries pickle_s "old s / MB / flt" "new s / MB / flt" old_x new_x "medians: pickle old new"
for f in "$@"; do
	for i in $(seq "$repeat"); do
		python3 - "$f" >>"$tmp/py" <<'PY'
import pickle, sys, time
data = open(sys.argv[1], "rb").read()
t = time.perf_counter()
s = pickle.loads(data)
print("%.3f %d" % (time.perf_counter() - t, sum(len(x) for x in s.get("device_traces", []))))
PY
		for b in old new; do
			bin=$old
			[ $b = new ] && bin=$new
			t0=$EPOCHREALTIME # bash's clock: no process of its own
			/usr/bin/time -f "%M %R" -o "$tmp/t" "$bin" import "$f" -o "$tmp/$b.fst" -q >/dev/null
			t1=$EPOCHREALTIME
			echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') $(cat "$tmp/t")" >>"$tmp/$b"
		done
	done
	cmp -s "$tmp/old.fst" "$tmp/new.fst" || echo "$(basename "$f"): the two traces differ" >&2
	best() { sort -g "$1" | head -1; }
	median() { sort -g "$1" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
	read -r py n < <(best "$tmp/py")
	read -r os om of < <(best "$tmp/old")
	read -r ns nm nf < <(best "$tmp/new")
	printf '%-28s %8d %8.3f %8.3f/%4d/%5d %8.3f/%4d/%5d %6.1fx %6.1fx   %.3f %.3f %.3f\n' "$(basename "$f")" "$n" "$py" \
		"$os" $((om / 1024)) "$of" "$ns" $((nm / 1024)) "$nf" \
		"$(awk -v a="$py" -v b="$os" 'BEGIN { print a / b }')" "$(awk -v a="$py" -v b="$ns" 'BEGIN { print a / b }')" \
		"$(median "$tmp/py")" "$(median "$tmp/old")" "$(median "$tmp/new")"
	rm -f "$tmp/py" "$tmp/old" "$tmp/new"
done
