#!/usr/bin/env bash
# Benchmarks `fragsim import` against Python's pickle.load of the same
# snapshot, and the trace's size against the gzip'd pickle.
#
# usage: bench/import/run.sh [SNAPSHOT.pickle ...]
#   With no argument, writes synthetic snapshots of 100k and 1M entries with
#   gen_snapshot.py (into $BENCH_DIR, default /tmp/fragsim-bench-import).
#   FRAGSIM=path/to/fragsim uses that binary instead of building one.
#   REPEAT=n takes the best of n runs of each side (default 3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dir=${BENCH_DIR:-/tmp/fragsim-bench-import}
repeat=${REPEAT:-3}
mkdir -p "$dir"
if [ -z "${FRAGSIM:-}" ]; then
	FRAGSIM="$dir/fragsim"
	(cd "$root" && CGO_ENABLED=0 go build -o "$FRAGSIM" ./cmd/fragsim)
fi
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
	for n in 100000 1000000; do
		f="$dir/synthetic-$n.pickle"
		[ -s "$f" ] || python3 "$here/gen_snapshot.py" "$f" "$n" 8
		files+=("$f")
	done
fi

best() { sort -g | head -1; }

printf '%-28s %9s %10s %10s %10s %7s %12s %11s %7s\n' file entries pickle_s warm_s fragsim_s speed gzip_bytes trace_bytes size
for f in "${files[@]}"; do
	# pickle.loads of the bytes already in memory, in a fresh interpreter
	# each time (the first load of a process pays for fresh memory, as
	# fragsim import does), best of $repeat; and the best of $repeat loads
	# repeated in one interpreter (memory already touched).
	py_s=$(for _ in $(seq "$repeat"); do python3 - "$f" <<'PY'
import pickle, sys, time, gzip
path = sys.argv[1]
opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
with opener(path, "rb") as fh:
    data = fh.read()
t = time.perf_counter()
s = pickle.loads(data)
print("%.3f" % (time.perf_counter() - t))
PY
	done | best)
	read -r entries warm_s < <(python3 - "$f" "$repeat" <<'PY'
import pickle, sys, time, gzip
path, repeat = sys.argv[1], int(sys.argv[2])
opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
with opener(path, "rb") as fh:
    data = fh.read()
s = pickle.loads(data)
n = sum(len(t) for t in s.get("device_traces", []))
del s
best = None
for _ in range(repeat):
    t = time.perf_counter()
    s = pickle.loads(data)
    d = time.perf_counter() - t
    del s
    best = d if best is None else min(best, d)
print(n, "%.3f" % best)
PY
)
	out="$dir/$(basename "$f").fst"
	go_s=$(for _ in $(seq "$repeat"); do
		s=$(date +%s.%N)
		"$FRAGSIM" import "$f" -o "$out" -q >/dev/null
		e=$(date +%s.%N)
		awk -v a="$s" -v b="$e" 'BEGIN { printf "%.3f\n", b - a }'
	done | best)
	if head -c2 "$f" | od -An -tx1 | grep -q '1f 8b'; then gz=$(stat -c %s "$f"); else gz=$(gzip -c "$f" | wc -c); fi
	tr=$(stat -c %s "$out")
	printf '%-28s %9d %10.3f %10.3f %10.3f %6.1fx %12d %11d %6.1fx\n' "$(basename "$f")" "$entries" "$py_s" "$warm_s" "$go_s" \
		"$(awk -v a="$py_s" -v b="$go_s" 'BEGIN { print a / b }')" "$gz" "$tr" "$(awk -v a="$gz" -v b="$tr" 'BEGIN { print a / b }')"
done
