#!/usr/bin/env bash
# Fault and load suite: runs fragsim as a hostile user would and fails on a
# panic, a hang, a memory blow-up or a lost file. Bounded in time: every
# command runs under `timeout` (TIMEOUT s, default 20) and `prlimit` (an
# address-space cap, AS_LIMIT bytes, default 16 GiB, a safety net), and its
# peak RSS is read with /usr/bin/time.
#
#   1. corruption: a real trace cut at CUTS offsets and with FLIPS single
#      bytes flipped, read by `info` and `replay`: exit 1 or 2, never a panic;
#   2. sizes: one alloc (and its free) of 2^40, 2^47, 2^62 and 2^64-1 bytes
#      under every policy: no panic, no hang, under RSS_LIMIT;
#   3. numbers: NaN and Inf in flags and settings: refused (exit 1 or 2);
#   4. bombs: a gzip'd pickle of BOMB_MIB MiB of zeros and 95 MiB of empty
#      pickle lists: refused or imported within RSS_LIMIT (default 1 GiB);
#   5. outputs: two synth runs to one -o both leave a whole trace; synth
#      interrupted by SIGINT exits 130 and leaves the previous file and no
#      temporary file.
#
# usage: bench/faults.sh            (FRAGSIM=path uses that binary)
# Prints one line per failed case and a summary table; exits 1 on any failure.
set -u
cd "$(dirname "$0")/.."
root=$PWD
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fragsim-faults.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fs=${FRAGSIM:-}
if [ -z "$fs" ]; then
	CGO_ENABLED=0 go build -o "$tmp/fragsim" ./cmd/fragsim || exit 1
	fs=$tmp/fragsim
fi
TIMEOUT=${TIMEOUT:-20}
AS_LIMIT=${AS_LIMIT:-17179869184}
RSS_LIMIT_KB=$(( ${RSS_LIMIT:-1073741824} / 1024 ))
CUTS=${CUTS:-60}
FLIPS=${FLIPS:-60}
BOMB_MIB=${BOMB_MIB:-1024}

declare -A total failed maxrss
fail=0
# check GROUP WANT CMD...: runs CMD, and fails the case on a panic, a
# timeout, a kill, an RSS above the limit, or an exit code not in WANT
# (a regex such as '^[12]$'; '.' accepts any).
check() {
	local group=$1 want=$2
	shift 2
	total[$group]=$(( ${total[$group]:-0} + 1 ))
	/usr/bin/time -f '%M' -o "$tmp/rss" timeout -k 5 "$TIMEOUT" prlimit --as="$AS_LIMIT" "$@" >/dev/null 2>"$tmp/err"
	local rc=$? rss why=""
	rss=$(tail -n 1 "$tmp/rss" 2>/dev/null | tr -dc 0-9)
	rss=${rss:-0}
	[ "$rss" -gt "${maxrss[$group]:-0}" ] && maxrss[$group]=$rss
	if grep -q -e '^panic:' -e '^fatal error:' -e '^goroutine [0-9]' "$tmp/err"; then
		why="panic: $(grep -m1 -e '^panic:' -e '^fatal error:' "$tmp/err")"
	elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
		why="hang or kill (exit $rc)"
	elif [ "$rss" -gt "$RSS_LIMIT_KB" ]; then
		why="peak RSS $((rss / 1024)) MiB"
	elif ! [[ $rc =~ $want ]]; then
		why="exit $rc, want $want: $(head -c 200 "$tmp/err")"
	fi
	if [ -n "$why" ]; then
		failed[$group]=$(( ${failed[$group]:-0} + 1 ))
		fail=1
		echo "FAIL [$group] $*: $why"
	fi
}

# 1. Corruption sweeps.
src=$root/traces/baseline_s1.fst
size=$(stat -c %s "$src")
for i in $(seq 1 "$CUTS"); do
	off=$(( size * i / (CUTS + 1) ))
	head -c "$off" "$src" >"$tmp/cut.fst"
	check cut '^[12]$' "$fs" info "$tmp/cut.fst"
	check cut '^[12]$' "$fs" replay "$tmp/cut.fst"
done
for i in $(seq 1 "$FLIPS"); do
	off=$(( (size * i / (FLIPS + 1)) ))
	cp "$src" "$tmp/flip.fst"
	printf '\xa5' | dd of="$tmp/flip.fst" bs=1 seek="$off" conv=notrunc status=none
	check flip '^[012]$' "$fs" info "$tmp/flip.fst"
	check flip '^[012]$' "$fs" replay "$tmp/flip.fst"
done

# 2. Sizes under every policy.
for s in 1099511627776 140737488355328 4611686018427387904 18446744073709551615; do
	printf '# fragsim text v1\nheader {}\nalloc t=1 dev=0 stream=0x0 addr=0x7f0000000000 size=%s\nfree_requested t=2 dev=0 stream=0x0 addr=0x7f0000000000 size=%s\nfree_completed t=3 dev=0 stream=0x0 addr=0x7f0000000000 size=%s\n' \
		"$s" "$s" "$s" >"$tmp/size.txt"
	rm -f "$tmp/size.fst"
	check size '.' "$fs" undump "$tmp/size.txt" -o "$tmp/size.fst"
	[ -f "$tmp/size.fst" ] || continue
	for p in caching expandable pooled bfc paged ideal; do
		check size '.' "$fs" replay --policy "$p" "$tmp/size.fst"
	done
done

# 3. NaN and Inf.
for v in NaN Inf -Inf; do
	check number '^[12]$' "$fs" replay --fraction "$v" "$src"
	check number '^[12]$' "$fs" replay --conf "garbage_collection_threshold:$v" "$src"
	check number '^[12]$' "$fs" cohost --offset "0,$v" "$src" "$src"
	check number '^[12]$' "$fs" cohost --scale "$v" "$src"
done

# 4. Bombs.
head -c $(( BOMB_MIB << 20 )) /dev/zero | gzip -1 >"$tmp/zeros.pickle.gz"
check bomb '.' "$fs" import -q "$tmp/zeros.pickle.gz" -o "$tmp/bomb.fst"
python3 -c 'import sys; sys.stdout.buffer.write(b"\x80\x02" + b"]" * (95 << 20) + b".")' >"$tmp/lists.pickle"
check bomb '.' "$fs" import -q "$tmp/lists.pickle" -o "$tmp/bomb.fst"

# 5. Outputs: concurrent writers, an interrupt mid-write.
out=$tmp/out/same.fst
mkdir -p "$tmp/out"
"$fs" synth -q -o "$out" --events 200k --seed 1 >/dev/null 2>&1 &
a=$!
"$fs" synth -q -o "$out" --events 200k --seed 2 >/dev/null 2>&1 &
b=$!
wait $a; ra=$?
wait $b; rb=$?
check output '^0$' "$fs" info "$out"
total[output]=$(( ${total[output]:-0} + 1 ))
if [ $ra -ne 0 ] || [ $rb -ne 0 ] || [ "$(ls -A "$tmp/out")" != "same.fst" ]; then
	failed[output]=$(( ${failed[output]:-0} + 1 )); fail=1
	echo "FAIL [output] two writers to one -o: exits $ra and $rb, directory: $(ls -A "$tmp/out" | tr '\n' ' ')"
fi
cp "$out" "$tmp/prev.fst"
"$fs" synth -q -o "$out" --events 500M --seed 3 >/dev/null 2>&1 &
c=$!
sleep 1
kill -INT $c
wait $c; rc=$?
total[output]=$(( ${total[output]:-0} + 1 ))
if [ $rc -ne 130 ] || ! cmp -s "$out" "$tmp/prev.fst" || [ "$(ls -A "$tmp/out")" != "same.fst" ]; then
	failed[output]=$(( ${failed[output]:-0} + 1 )); fail=1
	echo "FAIL [output] synth interrupted: exit $rc (want 130), previous file $(cmp -s "$out" "$tmp/prev.fst" && echo kept || echo lost), directory: $(ls -A "$tmp/out" | tr '\n' ' ')"
fi

echo
echo "| group | cases | failed | max RSS MiB |"
echo "|---|---:|---:|---:|"
for g in cut flip size number bomb output; do
	echo "| $g | ${total[$g]:-0} | ${failed[$g]:-0} | $(( ${maxrss[$g]:-0} / 1024 )) |"
done
exit $fail
