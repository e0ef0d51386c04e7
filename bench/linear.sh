#!/usr/bin/env bash
# Linearity benchmark: replays synthetic traces of 1M and 10M events
# (fragsim synth, seed 11) under every policy, one replay at a time, and
# prints each policy's CPU seconds (user + system: what other jobs on a
# shared machine skew least), wall seconds and max RSS at both sizes, with
# the 10M/1M ratio of CPU seconds. Target: a ratio of at most 12 for every
# policy (replay time linear in the trace's length). Exits 1 when a policy
# misses it.
#
# Usage: bench/linear.sh [POLICY...]     (default: every policy fragsim lists)
# Env:   SMALL, LARGE: the two sizes (default 1M, 10M; suffixes k, M),
#        SEED (default 11), REPS=r times r small replays in a row and divides
#          by r (default 10: a small replay takes about as long as the 10 ms
#          the kernel accounts CPU time in), BEST=n does that n times, and
#          the large replay n times, and keeps the least CPU of each
#          (default 3),
#        TARGET (default 12), TIMEOUT per replay in seconds (default 600),
#        FRAGSIM_BIN=path uses that binary instead of building the checkout.
set -u
cd "$(dirname "$0")/.."
small=${SMALL:-1M}
large=${LARGE:-10M}
seed=${SEED:-11}
best=${BEST:-3}
reps=${REPS:-10}
target=${TARGET:-12}
limit=${TIMEOUT:-600}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fragsim-linear.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
bin=$tmp/fragsim
if [ -n "${FRAGSIM_BIN:-}" ]; then
  cp "$FRAGSIM_BIN" "$bin"
else
  CGO_ENABLED=0 go build -o "$bin" ./cmd/fragsim || { echo "linear: build failed" >&2; exit 1; }
fi
policies=("$@")
if [ ${#policies[@]} -eq 0 ]; then
  # The registry's names, from the replay command's help.
  read -r -a policies <<<"$("$bin" replay --help | sed -n 's/.*allocator policy (\([^)]*\)).*/\1/p' | tr -d ,)"
fi
[ ${#policies[@]} -gt 0 ] || { echo "linear: no policies" >&2; exit 1; }

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "machine: $(nproc) cores, ${cpu:-unknown CPU}; $(go version 2>/dev/null | cut -d' ' -f3-4)"
echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo +worktree); load average $(cut -d' ' -f1-3 /proc/loadavg)"

# timed CMD...: runs CMD under /usr/bin/time; sets t_cpu, t_wall, t_rss
# (MiB) and t_rc.
timed() {
  local tv=$tmp/time.txt
  timeout "$limit" /usr/bin/time -v -o "$tv" "$@" >"$tmp/out.txt" 2>&1
  t_rc=$?
  t_cpu=$(awk -F': ' '/(User|System) time \(seconds\)/ {c += $2} END {printf "%.3f", c}' "$tv" 2>/dev/null)
  t_wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tv" 2>/dev/null | awk -F: '{ if (NF==3) print $1*3600+$2*60+$3; else print $1*60+$2 }')
  t_rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2/1024}' "$tv" 2>/dev/null)
}

for s in "$small" "$large"; do
  echo "synth $s events, seed $seed" >&2
  "$bin" synth -q -o "$tmp/$s.fst" --events "$s" --seed "$seed" >/dev/null || { echo "linear: synth $s failed" >&2; exit 1; }
done

echo
echo "| policy | $small CPU s | $small wall s | $large CPU s | $large wall s | $large max RSS MiB | ratio (CPU) | target |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
fail=0
for p in "${policies[@]}"; do
  echo "replay --policy $p" >&2
  c1=""
  w1=""
  for ((i = 0; i < best; i++)); do
    timed sh -c 'for i in $(seq "$1"); do "$2" replay --policy "$3" "$4" || exit; done' sh "$reps" "$bin" "$p" "$tmp/$small.fst"
    if [ "$t_rc" -ne 0 ]; then break; fi
    t_cpu=$(awk "BEGIN{printf \"%.3f\", $t_cpu / $reps}")
    t_wall=$(awk "BEGIN{printf \"%.3f\", $t_wall / $reps}")
    if [ -z "$c1" ] || awk "BEGIN{exit !($t_cpu < $c1)}"; then c1=$t_cpu; w1=$t_wall; fi
  done
  if [ "$t_rc" -ne 0 ]; then
    echo "| $p | exit $t_rc: $(tail -1 "$tmp/out.txt" | cut -c1-60) | | | | | | fail |"
    fail=1
    continue
  fi
  c2=""
  for ((i = 0; i < best; i++)); do
    timed "$bin" replay --policy "$p" "$tmp/$large.fst"
    if [ "$t_rc" -ne 0 ]; then break; fi
    if [ -z "$c2" ] || awk "BEGIN{exit !($t_cpu < $c2)}"; then c2=$t_cpu; w2=$t_wall; r2=$t_rss; fi
  done
  if [ "$t_rc" -ne 0 ]; then
    echo "| $p | $c1 | $w1 | exit $t_rc$([ "$t_rc" -eq 124 ] && echo ": over ${limit}s") | | | | fail |"
    fail=1
    continue
  fi
  t_cpu=$c2 t_wall=$w2 t_rss=$r2
  ratio=$(awk "BEGIN{ if ($c1 > 0) printf \"%.1f\", $t_cpu / $c1; else print \"inf\" }")
  verdict=ok
  if [ "$ratio" = inf ] || awk "BEGIN{exit !($ratio > $target)}"; then verdict="over ${target}x"; fail=1; fi
  echo "| $p | $c1 | $w1 | $t_cpu | $t_wall | $t_rss | ${ratio}x | $verdict |"
done
exit $fail
