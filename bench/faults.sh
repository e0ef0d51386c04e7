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
#      temporary file;
#   6. round trips: export --format memory_viz then import gives the trace
#      replayed (peak, OOMs, device calls, every address), for expandable
#      segments, CUDA graphs, a memory fraction, two devices; the export of
#      2M events stays under EXPORT_RSS_LIMIT (default 128 MiB);
#   7. entry checks: device logs (samples outside the trace, a total of 0, a
#      gzip'd log of one repeated line), RMM clocks (past midnight, going
#      back), sizes that wrap, the forecast on an unlimited device, synth
#      configs that no trace can hold, a snapshot's "fragsim" key;
#   8. budgets: standard input of zeros, and of a pickle's first bytes and
#      zeros, is refused in bounded memory;
#   9. pipes: import, replay, compare, analyze, report, export and cohost of
#      <(cat FILE), standard input and a named FIFO read their input whole,
#      once, and leave no temporary file (TMPDIR is the run's own);
#  10. the report: 200,000-character agent, model and frame names are cut,
#      and a moment with no segment is written as an empty list;
#  11. one rule for every output: a failed import with --device-log leaves
#      the earlier output, a device log or a plot's input (by name, symbolic
#      link or hard link; standard input or output too) is refused as an
#      output, FIFOs, /dev/stdout and `-o -` are written through, outputs
#      that cannot be written fail, and SIGHUP, SIGQUIT, SIGINT or SIGTERM
#      while an output is written exits 130 leaving the earlier file and no
#      temporary one;
#  12. exit codes: an empty -o is a usage error (2), a bad setting stored in
#      a trace a failure (1), a snapshot cut short 2, -q accepted by every
#      command that draws progress, more than 64 co-hosted processes refused;
#  13. terminal output: a snapshot's names that set the window's title, write
#      the clipboard or clear the screen are escaped in every text output.
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
# Every temporary file a command makes goes here; it must be empty at the end.
export TMPDIR=$tmp/tmpdir
mkdir -p "$TMPDIR"
# check GROUP WANT CMD...: runs CMD, and fails the case on a panic, a
# timeout, a kill, an RSS above the limit (RSS_CASE_KB for this case, when
# set), an exit code not in WANT (a regex such as '^[12]$'; '.' accepts
# any), or, when GREP is set, an output (stdout and stderr) without a
# match of that extended regex (NOGREP: with one). The output is left in
# $tmp/stdout.
check() {
	local group=$1 want=$2
	shift 2
	total[$group]=$(( ${total[$group]:-0} + 1 ))
	/usr/bin/time -f '%M' -o "$tmp/rss" timeout -k 5 "$TIMEOUT" prlimit --as="$AS_LIMIT" "$@" >"$tmp/stdout" 2>"$tmp/err"
	local rc=$? rss why="" limit=${RSS_CASE_KB:-$RSS_LIMIT_KB}
	rss=$(tail -n 1 "$tmp/rss" 2>/dev/null | tr -dc 0-9)
	rss=${rss:-0}
	[ "$rss" -gt "${maxrss[$group]:-0}" ] && maxrss[$group]=$rss
	if grep -q -e '^panic:' -e '^fatal error:' -e '^goroutine [0-9]' "$tmp/err"; then
		why="panic: $(grep -m1 -e '^panic:' -e '^fatal error:' "$tmp/err")"
	elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
		why="hang or kill (exit $rc)"
	elif [ "$rss" -gt "$limit" ]; then
		why="peak RSS $((rss / 1024)) MiB"
	elif ! [[ $rc =~ $want ]]; then
		why="exit $rc, want $want: $(head -c 200 "$tmp/err")"
	elif [ -n "${GREP:-}" ] && ! cat "$tmp/stdout" "$tmp/err" | grep -Eq -- "$GREP"; then
		why="no output matching /$GREP/: $(cat "$tmp/stdout" "$tmp/err" | head -c 300)"
	elif [ -n "${NOGREP:-}" ] && cat "$tmp/stdout" "$tmp/err" | grep -Eq -- "$NOGREP"; then
		why="output matching /$NOGREP/: $(cat "$tmp/stdout" "$tmp/err" | grep -Em1 -- "$NOGREP" | head -c 300)"
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

# same GROUP WHAT A B: fails the case unless A and B are equal.
same() {
	total[$1]=$(( ${total[$1]:-0} + 1 ))
	if [ "$3" != "$4" ]; then
		failed[$1]=$(( ${failed[$1]:-0} + 1 )); fail=1
		echo "FAIL [$1] $2: $3 against $4"
	fi
}

# replayline TRACE: the replay's peak reserved, OOMs and device calls.
replayline() {
	"$fs" replay "$1" 2>/dev/null | grep -E '^(peak reserved|OOMs|device allocs|device frees|alloc retries) ' | tr -s ' ' | tr '\n' ';'
}

# 6. Round trips through PyTorch's snapshot format.
rt=$tmp/rt
mkdir -p "$rt"
printf '# fragsim text v1\nheader {"producer":"synthetic","gpu_total_bytes":1073741824}\n' >"$rt/two.txt"
for i in $(seq 1 30); do
	d=$(( i % 2 ))
	printf 'alloc t=%d dev=%d stream=0x0 addr=0x%x size=%d\n' $(( i * 1000 )) $d $(( i << 32 )) $(( (i % 4 + 1) << 21 )) >>"$rt/two.txt"
	if [ $i -gt 2 ]; then
		j=$(( i - 2 ))
		printf 'free_requested t=%d dev=%d stream=0x0 addr=0x%x size=%d\nfree_completed t=%d dev=%d stream=0x0 addr=0x%x size=%d\n' \
			$(( i * 1000 + 500 )) $(( j % 2 )) $(( j << 32 )) $(( (j % 4 + 1) << 21 )) $(( i * 1000 + 500 )) $(( j % 2 )) $(( j << 32 )) $(( (j % 4 + 1) << 21 )) >>"$rt/two.txt"
	fi
done
"$fs" undump "$rt/two.txt" -o "$rt/two.fst" >/dev/null 2>&1
for t in "$root/traces/conformance/expandable_mixed.fst" "$root/traces/serving/graphs_recapture_expandable_s1.fst" \
	"$root/traces/conformance/fraction_large.live.fst" "$root/traces/conformance/ring_streams.fst" "$rt/two.fst"; do
	b=$(basename "$t" .fst)
	check roundtrip '^0$' "$fs" export --format memory_viz "$t" -o "$rt/$b.pickle"
	check roundtrip '^0$' "$fs" import -q "$rt/$b.pickle" -o "$rt/$b.back.fst"
	same roundtrip "$b: replay of the import" "$(replayline "$rt/$b.back.fst")" "$(replayline "$t")"
	GREP='fidelity: ([0-9]+)/\1 allocs at recorded address, ([0-9]+)/\2 device events matched' check roundtrip '^0$' "$fs" replay "$rt/$b.back.fst"
done
"$fs" synth -q -o "$rt/big.fst" --events 2M --seed 1 >/dev/null 2>&1
RSS_CASE_KB=$(( ${EXPORT_RSS_LIMIT:-134217728} / 1024 )) check roundtrip '^0$' "$fs" export --format memory_viz "$rt/big.fst" -o "$rt/big.pickle"
rm -f "$rt"/*.pickle

# 7. Numbers checked where they enter.
ent=$tmp/ent
mkdir -p "$ent"
snap=$root/trace/pytorch/testdata/midrun.p4.pickle
printf '1000 0 4000 8000\n1764000000000200000 0 2000 8000\n' >"$ent/early.log"
GREP='merged 1 device-memory samples.*1 before the trace' check entry '^0$' "$fs" import -q "$snap" -o "$ent/a.fst" --device-log "$ent/early.log"
printf '1764000000000200000 0 0 0\n' >"$ent/zero.log"
GREP='total_bytes 0' check entry '^1$' "$fs" import -q "$snap" -o "$ent/b.fst" --device-log "$ent/zero.log"
yes "1764000000000200000 0 5 10" | head -c 1000000000 | gzip -1 >"$ent/bomb.log.gz"
GREP='decompression bomb' check entry '^1$' "$fs" import -q "$snap" -o "$ent/c.fst" --device-log "$ent/bomb.log.gz"
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,23:30:00.000000,allocate,0x1000,1024,0x0\n1,00:29:59.000000,free,0x1000,1024,0x0\n' >"$ent/wrap.csv"
GREP='passed midnight at line 3' check entry '^0$' "$fs" import "$ent/wrap.csv" -o "$ent/wrap.fst"
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,01:00:00.000000,allocate,0x1000,1024,0x0\n1,00:00:00.000000,free,0x1000,1024,0x0\n' >"$ent/back.csv"
GREP='back.csv:3: .*not monotonic' check entry '^1$' "$fs" import "$ent/back.csv" -o "$ent/back.fst"
for v in 9223372036854775808 18446744073709551616 257TiB 1e30GiB; do
	GREP='above the largest size|bad size' check entry '^2$' "$fs" cohost --context-overhead "$v" --capacity h200 "$src" "$src"
	check entry '^2$' "$fs" replay --capacity "$v" "$src"
done
GREP='min headroom: unlimited' NOGREP='TiB' check entry '^0$' "$fs" replay --forecast "$root/traces/conformance/all_default.fst"
for a in 10000000 4097 -1; do
	GREP='agents' check entry '^2$' "$fs" synth -q -o "$ent/s.fst" --agents "$a"
done
python3 -c 'import pickle,sys; pickle.dump({"device_traces":[[]],"segments":[],"fragsim":{"version":9}}, sys.stdout.buffer)' >"$ent/ext.pickle"
GREP='"fragsim": version 9' check entry '^1$' "$fs" import -q "$ent/ext.pickle" -o "$ent/ext.fst"
python3 -c 'import pickle,sys; pickle.dump({"device_traces":[[{"action":"alloc","addr":4096,"size":512,"stream":0,"time_us":1}]],"segments":[],"fragsim":{"version":1,"header":"","events":[[[7,"empty_cache",1,0,0,0,"text",""]]]}}, sys.stdout.buffer)' >"$ent/ext2.pickle"
GREP='place 7' check entry '^1$' "$fs" import -q "$ent/ext2.pickle" -o "$ent/ext2.fst"

# 8. Budgets on standard input.
GREP='not a snapshot' RSS_CASE_KB=262144 check budget '^1$' bash -c "head -c 2000000000 /dev/zero | exec '$fs' import -q - -o '$ent/z.fst'"
GREP='unknown opcode' RSS_CASE_KB=262144 check budget '^1$' bash -c "(printf '\x80\x04'; head -c 1000000000 /dev/zero) | exec '$fs' import -q - -o '$ent/z.fst'"
GREP='not a snapshot' check budget '^1$' bash -c "head -c 2000000000 /dev/zero | exec '$fs' import -q /dev/stdin -o '$ent/z.fst'"

# 9. Inputs that can be read only once.
pt=$root/traces/conformance/plain_tiny.fst
check pipe '^0$' bash -c "exec '$fs' import -q <(cat '$snap') -o '$ent/p1.fst'"
check pipe '^0$' bash -c "exec '$fs' import -q - -o '$ent/p2.fst' <'$snap'"
check pipe '^0$' bash -c "cat '$snap' | exec '$fs' import -q - -o '$ent/p3.fst'"
check pipe '^0$' bash -c "exec '$fs' import --format rmm <(cat '$ent/wrap.csv') -o '$ent/p4.fst'"
check pipe '^0$' bash -c "exec '$fs' info <(cat '$pt')"
check pipe '^0$' bash -c "cat '$pt' | exec '$fs' replay -"
for cmd in "replay --min-capacity" "compare" "analyze" "report -o $ent/r.html" "export --format memory_viz -o $ent/e.pickle" \
	"export --format perfetto -o $ent/e.json"; do
	check pipe '^0$' bash -c "exec '$fs' $cmd <(cat '$pt')"
done
check pipe '^0$' bash -c "exec '$fs' cohost --capacity h200 <(cat '$pt') <(cat '$pt')"
rm -f "$ent/fifo"
mkfifo "$ent/fifo"
(cat "$pt" >"$ent/fifo" &)
check pipe '^0$' "$fs" compare "$ent/fifo"
(cat "$snap" >"$ent/fifo" &)
check pipe '^0$' "$fs" import -q "$ent/fifo" -o "$ent/p5.fst"
same pipe "a snapshot through a pipe" "$(cmp -s "$ent/p1.fst" "$ent/p2.fst" && cmp -s "$ent/p1.fst" "$ent/p3.fst" && cmp -s "$ent/p1.fst" "$ent/p5.fst" && echo same)" same

# 10. The report's labels and empty moments.
long=$(head -c 200000 /dev/zero | tr '\0' A)
{
	printf '# fragsim text v1\nheader {"producer":"synthetic","gpu_total_bytes":1073741824}\n'
	printf 'string 1 "%s"\nstring 2 "%s"\n' "$long" "${long//A/M}"
	printf 'marker t=1000 dev=0 stream=0x0 marker=model text=2\nmarker t=2000 dev=0 stream=0x0 marker=agent text=1\n'
	for i in 1 2 3 4; do printf 'alloc t=%d000 dev=0 stream=0x0 addr=0x%x size=3145728\n' $(( i + 2 )) $(( i << 32 )); done
	for i in 1 3 2 4; do printf 'free_requested t=%d000 dev=0 stream=0x0 addr=0x%x size=3145728\nfree_completed t=%d000 dev=0 stream=0x0 addr=0x%x size=3145728\n' $(( i + 8 )) $(( i << 32 )) $(( i + 8 )) $(( i << 32 )); done
	printf 'empty_cache t=20000 dev=0 stream=0x0\n'
	for i in $(seq 1 40); do printf 'marker t=%d000 dev=0 stream=0x0 marker=text text=1\n' $(( 20 + i )); done
} >"$ent/long.txt"
"$fs" undump "$ent/long.txt" -o "$ent/long.fst" >/dev/null 2>&1
check report '^0$' "$fs" report "$ent/long.fst" -o "$ent/long.html"
same report "a run of 201 A on the page" "$(grep -c 'AAAAAAAAAA\{191\}' "$ent/long.html" 2>/dev/null)" 0
same report '"segments":null on the page' "$(grep -c '"segments":null' "$ent/long.html" 2>/dev/null)" 0

# 11. Every output, one rule: the device-log merge inside the import's
# write, every input (device logs, plot inputs, through links) refused as an
# output, pipes and FIFOs written through, "-" as standard output, and a
# signal (SIGHUP, SIGQUIT too) that leaves no temporary file.
one=$tmp/one
mkdir -p "$one"
printf 'garbage' >"$one/bad.pickle"
printf '1764000000000200000 0 2000 8000\n' >"$one/dev.log"
cp "$one/dev.log" "$one/dev.log.orig"
"$fs" import -q "$snap" -o "$one/old.fst" >/dev/null 2>&1
cp "$one/old.fst" "$one/old.orig"
GREP='nothing was written to' NOGREP='merged' check oneout '^1$' "$fs" import -q "$one/bad.pickle" --device-log "$one/dev.log" -o "$one/old.fst"
same oneout "a failed import with --device-log kept the earlier output" "$(cmp -s "$one/old.fst" "$one/old.orig" && echo kept)" kept
check oneout '^1$' "$fs" import -q "$one/bad.pickle" --device-log "$one/dev.log" -o /dev/null
GREP='the output is the input' check oneout '^1$' "$fs" import -q "$snap" --device-log "$one/dev.log" -o "$one/dev.log"
GREP='the output is the input' check oneout '^1$' "$fs" import -q "$snap" -o "$snap"
same oneout "the device log as the output" "$(cmp -s "$one/dev.log" "$one/dev.log.orig" && echo kept)" kept
rm -f "$one/fifo"
mkfifo "$one/fifo"
(cat "$one/fifo" >"$one/fromfifo.fst" &)
check oneout '^0$' "$fs" import -q "$snap" --device-log "$one/dev.log" -o "$one/fifo"
sleep 0.2
GREP='device_mem +1' check oneout '^0$' "$fs" info "$one/fromfifo.fst"
GREP='device_mem +1' check oneout '^0$' bash -c "set -o pipefail; '$fs' import -q '$snap' --device-log '$one/dev.log' -o /dev/stdout | '$fs' info -"
GREP='device_mem +1' check oneout '^0$' bash -c "set -o pipefail; '$fs' import '$snap' --device-log '$one/dev.log' -o - | '$fs' info -"
check oneout '^0$' bash -c "set -o pipefail; '$fs' export -q --format perfetto '$pt' -o - | python3 -c 'import json,sys; json.load(sys.stdin)'"
check oneout '^0$' bash -c "set -o pipefail; '$fs' dump '$pt' -o - | '$fs' undump - -o '$one/undumped.fst'"
# plots over their inputs, through a name, a symbolic link and a hard link
pl=$one/pl
mkdir -p "$pl"
cp "$pt" "$one/in.fst"
cp "$pt" "$pl/timeline.png"
cp "$pt" "$pl/forecast.png"
ln -s ../in.fst "$pl/views.png"
ln "$one/in.fst" "$pl/forecast.svg"
GREP='is the input' check oneout '^1$' "$fs" compare -q "$pl/timeline.png" --out "$pl"
GREP='is the input' check oneout '^1$' "$fs" replay -q "$pl/forecast.png" --forecast --out "$pl"
GREP='is the input' check oneout '^1$' "$fs" compare -q "$one/in.fst" --out "$pl"
GREP='is the input' check oneout '^1$' "$fs" cohost -q "$one/in.fst" --out "$pl"
GREP='is the input' check oneout '^1$' "$fs" compare -q "$one/in.fst" --html "$pl/views.png"
same oneout "plot inputs" "$(cmp -s "$pt" "$pl/timeline.png" && cmp -s "$pt" "$pl/forecast.png" && cmp -s "$pt" "$one/in.fst" && echo kept)" kept
# standard input and standard output that are the same file as the output or the input
"$fs" dump "$pt" -o "$one/t.txt" >/dev/null 2>&1
cp "$one/t.txt" "$one/t.orig"
GREP='is the input' check oneout '^1$' bash -c "exec '$fs' undump - -o '$one/t.txt' <'$one/t.txt'"
GREP='is the input' check oneout '^1$' bash -c "exec '$fs' undump '$one/t.txt' -o - >>'$one/t.txt'"
same oneout "a text read from standard input" "$(cmp -s "$one/t.txt" "$one/t.orig" && echo kept)" kept
# outputs that cannot be written
for cmd in "dump $pt" "report -q $pt" "export -q --format perfetto $pt" "undump $one/t.txt" "import -q $snap"; do
	check oneout '^1$' "$fs" $cmd -o "$one/no/such/dir/out"
done
check oneout '^1$' "$fs" export -q --format perfetto "$pt" -o /dev/full
ln -sf loop "$one/loop"
check oneout '^1$' "$fs" dump "$pt" -o "$one/loop"
check oneout '^1$' "$fs" import -q "$snap" --device-log "$one" -o "$one/x.fst"
GREP='merged 1 device-memory' check oneout '^0$' bash -c "exec '$fs' import -q '$snap' --device-log <(cat '$one/dev.log') -o '$one/y.fst'"
# a signal while an output is written: 130, the earlier file kept, no temporary file
sig=$one/sig
mkdir -p "$sig"
for s in HUP QUIT INT TERM; do
	rm -f "$sig"/* "$sig"/.[!.]*
	printf 'previous' >"$sig/out"
	"$fs" export -q --format memory_viz "$rt/big.fst" -o "$sig/out" >/dev/null 2>&1 &
	p=$!
	for _ in $(seq 1 200); do [ "$(ls -A "$sig" | wc -l)" -gt 1 ] && break; sleep 0.05; done
	kill -"$s" $p
	wait $p; rc=$?
	total[oneout]=$(( ${total[oneout]:-0} + 1 ))
	if [ $rc -ne 130 ] || [ "$(cat "$sig/out")" != previous ] || [ "$(ls -A "$sig")" != out ]; then
		failed[oneout]=$(( ${failed[oneout]:-0} + 1 )); fail=1
		echo "FAIL [oneout] SIG$s during export: exit $rc (want 130), directory: $(ls -A "$sig" | tr '\n' ' ')"
	fi
done
rm -f "$sig"/* "$sig"/.[!.]*
printf 'previous' >"$sig/out"
"$fs" import -q "$snap" --device-log "$one/dev.log" -o "$sig/out" >/dev/null 2>&1 &
p=$!
# The signal goes to fragsim, not to the shell forked to start it: that
# shell would run this script's EXIT trap.
for _ in $(seq 1 200); do [ "$(readlink /proc/$p/exe 2>/dev/null)" = "$fs" ] && break; sleep 0.01; done
kill -HUP $p 2>/dev/null
wait $p; rc=$?
total[oneout]=$(( ${total[oneout]:-0} + 1 ))
if { [ $rc -ne 130 ] && [ $rc -ne 0 ] && [ $rc -ne 129 ]; } || [ "$(ls -A "$sig")" != out ]; then
	failed[oneout]=$(( ${failed[oneout]:-0} + 1 )); fail=1
	echo "FAIL [oneout] SIGHUP during import --device-log: exit $rc, directory: $(ls -A "$sig" | tr '\n' ' ')"
fi

# 12. Exit codes: the README's table in every command.
ex=$tmp/ex
mkdir -p "$ex"
for args in "import $snap -o" "import $snap --output" "dump $pt -o" "undump $one/t.txt -o" "synth -o" "report $pt -o" \
	"export --format perfetto $pt -o" "compare $pt --html" "compare $pt --out" "replay $pt --forecast --out" "cohost $pt --out"; do
	GREP='no output file named' check exit '^2$' "$fs" $args ""
done
printf '# fragsim text v1\nheader {"producer":"pytorch","alloc_conf":"garbage_collection_threshold:NaN"}\nalloc t=1000 dev=0 stream=0x0 addr=0x7f0000000000 size=3145728\n' >"$ex/bad.txt"
"$fs" undump "$ex/bad.txt" -o "$ex/bad.fst" >/dev/null 2>&1
for cmd in "replay" "compare" "analyze" "cohost" "explain" "report -o $ex/b.html" "export --format memory_viz -o $ex/b.pickle"; do
	GREP='trace header' check exit '^1$' "$fs" $cmd "$ex/bad.fst"
done
python3 -c 'import sys; d=open(sys.argv[1],"rb").read(); open(sys.argv[2],"wb").write(d[:len(d)*2//3])' \
	"$root/trace/pytorch/testdata/empty_cache.p4.pickle" "$ex/cut.pickle"
GREP='kept the [0-9]+ events before the cut' check exit '^2$' "$fs" import -q "$ex/cut.pickle" -o "$ex/cut.fst"
check exit '^0$' "$fs" info "$ex/cut.fst"
for cmd in "import -q $snap -o $ex/q.fst" "synth -q -o $ex/s.fst --events 2000" "replay -q $pt" "compare -q $pt" "analyze -q $pt" \
	"report -q $pt -o $ex/q.html" "export -q --format memory_viz $pt -o $ex/q.pickle" "cohost -q $pt $pt" "explain -q $snap --request 1MiB"; do
	check exit '^0$' "$fs" $cmd
done
GREP='at most 64 processes' check exit '^2$' "$fs" cohost $(yes "$pt" | head -3000)

# 13. Terminal output: names that set the window's title, write the
# clipboard (OSC 52), clear the screen or turn text around come out escaped.
esc=$tmp/esc
mkdir -p "$esc"
python3 - "$esc/hostile.pickle" <<'PY'
import pickle, sys
E = "\x1b]0;PWNED\x07\x1b]52;c;aGk=\x07\x1b[2J\u202e\u009b31m"
fr = [{"name": "f" + E, "filename": "file" + E + ".py", "line": 3}]
MB = 1 << 20
ents, t = [], 1
for i in range(4):
    ents.append({"action": "alloc", "addr": 0x7f0000000000 + i * 5 * MB, "size": 5 * MB, "stream": 0, "time_us": t, "frames": fr}); t += 1
for i in (0, 2):
    for a in ("free_requested", "free_completed"):
        ents.append({"action": a, "addr": 0x7f0000000000 + i * 5 * MB, "size": 5 * MB, "stream": 0, "time_us": t, "frames": fr}); t += 1
ents.append({"action": "alloc", "addr": 0x7f0010000000, "size": 12 * MB, "stream": 0, "time_us": t, "frames": fr})
ents.append({"action": "oom", "addr": 0, "size": 30 * MB, "stream": 0, "time_us": t + 1, "frames": fr, "device_free": 0})
hdr = '{"producer":"pytorch","gpu_name":"G\\u001b]0;T\\u0007","torch_version":"2\\u001b[2J","approximate":["n\\u001b]52;c;aGk=\\u0007"]}'
pickle.dump({"device_traces": [ents], "segments": [], "fragsim": {"version": 1, "header": hdr, "events": []}}, open(sys.argv[1], "wb"), protocol=4)
PY
ctl=$'[\x01-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80\xae'
NOGREP=$ctl check escape '^0$' "$fs" import "$esc/hostile.pickle" -o "$esc/h.fst"
for cmd in "info" "dump" "replay" "replay --forecast" "analyze" "compare" "cohost" "explain"; do
	NOGREP=$ctl check escape '^[012]$' "$fs" $cmd "$esc/h.fst"
done
NOGREP=$ctl check escape '^[012]$' "$fs" explain "$esc/hostile.pickle"
GREP='f\\x1b\]0;PWNED\\a' check escape '^0$' "$fs" analyze "$esc/h.fst"

# Nothing may be left in the temporary directory, nor a temporary file
# beside any output.
same temp "temporary files left" "$(ls -A "$TMPDIR" | tr '\n' ' ')" ""
same temp "temporary files beside the outputs" "$(find "$tmp" -name '.*.tmp' -o -name '.fragsim-*' | tr '\n' ' ')" ""

echo
echo "| group | cases | failed | max RSS MiB |"
echo "|---|---:|---:|---:|"
for g in cut flip size number bomb output roundtrip entry budget pipe report oneout exit escape temp; do
	echo "| $g | ${total[$g]:-0} | ${failed[$g]:-0} | $(( ${maxrss[$g]:-0} / 1024 )) |"
done
exit $fail
