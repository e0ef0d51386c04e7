#!/usr/bin/env bash
# Compares two fragsim binaries' import of the same snapshots, and Python's
# pickle.loads of them, interleaved run by run so that other load on the
# machine hits all three alike; prints the best of REPEAT (default 5) wall
# seconds of each, with the run's peak RSS and minor page faults
# (/usr/bin/time), and checks that both binaries write the same trace.
#
# usage: bench/import/ab.sh OLD_FRAGSIM NEW_FRAGSIM SNAPSHOT.pickle ...
set -euo pipefail
old=$1 new=$2
shift 2
repeat=${REPEAT:-5}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fragsim-ab.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
printf '%-28s %8s %8s %18s %18s %7s %7s\n' file entries pickle_s "old s / MB / flt" "new s / MB / flt" old_x new_x
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
			/usr/bin/time -f "%e %M %R" -o "$tmp/t" "$bin" import "$f" -o "$tmp/$b.fst" -q >/dev/null
			cat "$tmp/t" >>"$tmp/$b"
		done
	done
	cmp -s "$tmp/old.fst" "$tmp/new.fst" || echo "$(basename "$f"): the two traces differ" >&2
	best() { sort -g "$1" | head -1; }
	read -r py n < <(best "$tmp/py")
	read -r os om of < <(best "$tmp/old")
	read -r ns nm nf < <(best "$tmp/new")
	printf '%-28s %8d %8.3f %8.2f/%4d/%5d %8.2f/%4d/%5d %6.1fx %6.1fx\n' "$(basename "$f")" "$n" "$py" \
		"$os" $((om / 1024)) "$of" "$ns" $((nm / 1024)) "$nf" \
		"$(awk -v a="$py" -v b="$os" 'BEGIN { print a / b }')" "$(awk -v a="$py" -v b="$ns" 'BEGIN { print a / b }')"
	rm -f "$tmp/py" "$tmp/old" "$tmp/new"
done
