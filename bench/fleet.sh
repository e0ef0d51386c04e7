#!/usr/bin/env bash
# Fleet benchmark: `fragsim fleet` over N traces (default 500) against the
# same traces analysed one by one with `fragsim compare --json`.
#
# The traces: every real trace under traces/ (127), then synthetic ones
# (`fragsim synth`) up to N, of 50K to 1M events, seeds and kinds varied
# (encode, decode, train, and mixes of them). Prints, with the machine and
# commit:
#   - the sum of the single-trace compare CPU times (user + system, each
#     compare run alone) and that sum divided by the cores;
#   - the fleet's wall time on Prism in-process, its CPU time and peak RSS,
#     and its wall time over the ideal (sum / cores): the target is at most
#     1.3x;
#   - Beam's per-trace overhead: the fleet over N inputs that fail at once
#     (8 bytes that are no trace, no snapshot) against the fleet over one,
#     per input: the pipeline's cost of a row, with a failed open in it
#     (an upper bound).
#
# Usage: bench/fleet.sh [N]
# Env:   CORES pins the fleet to that many CPUs (taskset 0..CORES-1; default:
#          all) and divides the sum by it,
#        PAR runs that many compares at once (default: the cores; each is
#          timed on its own CPU time, so this changes the wall time only),
#        KEEP=1 keeps the working directory, FRAGSIM_BIN_DIR uses the
#          binaries fragsim and fragsim-fleet there instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-500}
cores=${CORES:-$(nproc)}
par=${PAR:-$cores}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fragsim-fleet.XXXXXX")
if [ "${KEEP:-0}" != 1 ]; then trap 'rm -rf "$tmp"' EXIT; else echo "working directory: $tmp" >&2; fi
bin=${FRAGSIM_BIN_DIR:-$tmp/bin}
if [ -z "${FRAGSIM_BIN_DIR:-}" ]; then
	mkdir -p "$bin"
	go build -o "$bin/" ./cmd/fragsim ./cmd/fragsim-fleet
fi
pin=()
if [ -n "${CORES:-}" ]; then pin=(taskset -c "0-$((cores - 1))"); fi

# The corpus: the real traces, then synthetic ones.
mkdir -p "$tmp/in/real" "$tmp/in/synth"
i=0
while IFS= read -r f; do
	[ "$i" -ge "$n" ] && break
	cp "$f" "$tmp/in/real/$(echo "$f" | tr / _)"
	i=$((i + 1))
done < <(find traces -name '*.fst' | sort)
real=$i
sizes=(50k 100k 200k 400k 1M)
kinds=(encode decode train encode,decode encode,train decode,train)
s=0
while [ "$i" -lt "$n" ]; do
	ev=${sizes[$((s % ${#sizes[@]}))]}
	k=${kinds[$((s / ${#sizes[@]} % ${#kinds[@]}))]}
	echo "--seed $((s + 1)) --events $ev --kinds $k --agents $((2 + s % 4)) -o $tmp/in/synth/s$(printf %04d $s)_${k//,/+}_$ev.fst"
	i=$((i + 1)) s=$((s + 1))
done | xargs -P "$par" -L1 "$bin/fragsim" synth -q >/dev/null
s=$((n - real))
echo "corpus: $n traces ($real real, $s synthetic), $(du -sh "$tmp/in" | cut -f1)" >&2

# Each trace alone: compare --json, its CPU time.
find "$tmp/in" -name '*.fst' | sort >"$tmp/list"
export bin
time_one() {
	/usr/bin/time -f '%U %S' -o "$1.time" "$bin/fragsim" compare -q --json "$1" >/dev/null 2>&1 || true
	cat "$1.time"
}
export -f time_one
start=$(date +%s.%N)
xargs -P "$par" -I{} bash -c 'time_one "$@"' _ {} <"$tmp/list" >"$tmp/compare.cpu"
compare_wall=$(echo "$(date +%s.%N) - $start" | bc)
sum=$(awk '{s += $1 + $2} END {printf "%.1f", s}' "$tmp/compare.cpu")

# The fleet, on Prism in this process.
/usr/bin/time -f '%e %U %S %M' -o "$tmp/fleet.time" "${pin[@]}" "$bin/fragsim" fleet -q "@$tmp/list" --out "$tmp/out" >"$tmp/fleet.out" 2>"$tmp/fleet.err" || {
	echo "fleet failed:" >&2
	tail -5 "$tmp/fleet.err" >&2
}
read -r fwall fuser fsys frss < <(tail -1 "$tmp/fleet.time")
fcpu=$(echo "$fuser + $fsys" | bc)
ideal=$(echo "scale=2; $sum / $cores" | bc)
ratio=$(printf %.2f "$(echo "scale=3; $fwall / $ideal" | bc)")
failed=$(grep -c '"error"' "$tmp/out/traces.jsonl" || true)

# Beam's cost of a row: N inputs that fail at once, against one.
mkdir -p "$tmp/junk"
for j in $(seq 1 "$n"); do printf 'garbage!' >"$tmp/junk/j$j.fst"; done
/usr/bin/time -f '%e %U %S' -o "$tmp/one.time" "${pin[@]}" "$bin/fragsim" fleet -q "$tmp/junk/j1.fst" --out "$tmp/one" >/dev/null 2>&1 || true
/usr/bin/time -f '%e %U %S' -o "$tmp/junk.time" "${pin[@]}" "$bin/fragsim" fleet -q "$tmp/junk" --out "$tmp/junkout" >/dev/null 2>&1 || true
read -r owall _ _ < <(tail -1 "$tmp/one.time")
read -r jwall juser jsys < <(tail -1 "$tmp/junk.time")
per=$(echo "scale=2; 1000 * ($jwall - $owall) / ($n - 1)" | bc)
percpu=$(echo "scale=2; 1000 * ($juser + $jsys) / $n" | bc)

echo "# bench/fleet.sh $n on $(uname -m), $(nproc) CPUs ($cores for the fleet), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
echo "| figure | value |"
echo "|---|---:|"
echo "| traces | $n ($real real, $s synthetic; $failed rows with an error) |"
echo "| sum of single-trace compare CPU | ${sum} s |"
echo "| ideal: that sum / $cores cores | ${ideal} s |"
echo "| fleet wall (Prism in-process) | ${fwall} s |"
echo "| fleet wall / ideal | ${ratio}x (target 1.3x) |"
echo "| fleet CPU (the compares' sum: ${sum} s) | ${fcpu} s |"
echo "| fleet peak RSS | $((frss / 1024)) MiB |"
echo "| Beam's overhead a row ($n failing inputs against one) | ${per} ms wall, ${percpu} ms CPU |"
echo "| the fleet's start (one failing input) | ${owall} s |"
