#!/usr/bin/env bash
# Scale benchmark: builds fragsim, generates synthetic traces of 1, 10 and 100
# million events (fragsim synth, default multi-agent workload) and times every
# command that reads them with /usr/bin/time -v: decode (fragsim info decodes
# every event), replay under each policy, compare, cohost (the trace with
# itself, the second copy 1 s later, on an H200) and import of a synthetic
# PyTorch snapshot of as many entries (bench/import/genpickle, no stacks,
# written streaming: about 52 bytes of pickle an entry on disk). Prints a markdown table of wall seconds, CPU seconds (user +
# system: what other jobs on a shared machine skew least), max RSS and
# events/s (of wall time), with the machine and commit it ran on.
#
# Usage: bench/scale.sh [SIZE...]     (default: 1M 10M 100M)
# Env:   SEED (default 1), TIMEOUT per command in seconds (default 1200),
#        BEST=n runs each command n times and keeps the fastest (default: 2 up
#          to 10M events, 1 above),
#        ONLY="decode caching cohost ..." runs only these rows (names: synth
#          decode caching expandable pooled bfc ideal paged compare cohost import),
#        IMPORT_MAX largest snapshot imported, in entries (default: all;
#          100M entries are a 4.9 GiB pickle),
#        PICKLE_DIR keeps generated snapshots there for later runs
#          (snap_N.pickle; default: the temporary directory),
#        KEEP=1 keeps the temporary directory, FRAGSIM_EXTRA_SYNTH extra synth flags,
#        WORKTREE=1 builds the checkout as it is instead of HEAD,
#        FRAGSIM_BIN=path uses that binary instead of building one.
# A command that says "not built yet" (or does not exist) is shown as n/a.
set -u
cd "$(dirname "$0")/.."
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(1M 10M 100M)
seed=${SEED:-1}
limit=${TIMEOUT:-1200}
only=" ${ONLY:-synth decode caching expandable pooled bfc ideal paged compare cohost import} "

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fragsim-scale.XXXXXX")
if [ "${KEEP:-0}" != 1 ]; then trap 'rm -rf "$tmp"' EXIT; fi
pickles=${PICKLE_DIR:-$tmp}
mkdir -p "$pickles"
bin="$tmp/fragsim"
# Builds the committed tree (HEAD), so that other work in progress in the
# checkout does not get in the way; WORKTREE=1 builds the checkout as it is.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "${FRAGSIM_BIN:-}" ]; then
  cp "$FRAGSIM_BIN" "$bin"
  commit="$commit (prebuilt binary)"
elif [ "${WORKTREE:-0}" != 1 ] && git rev-parse --verify -q HEAD >/dev/null; then
  mkdir -p "$tmp/src" && git archive HEAD | tar -x -C "$tmp/src"
  (cd "$tmp/src" && CGO_ENABLED=0 go build -o "$bin" ./cmd/fragsim && go build -o "$tmp/genpickle" ./bench/import/genpickle) ||
    { echo "scale: build failed" >&2; exit 1; }
  rm -rf "$tmp/src"
else
  CGO_ENABLED=0 go build -o "$bin" ./cmd/fragsim || { echo "scale: build failed" >&2; exit 1; }
  commit="$commit+worktree"
fi
[ -x "$tmp/genpickle" ] || go build -o "$tmp/genpickle" ./bench/import/genpickle || { echo "scale: genpickle build failed" >&2; exit 1; }

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)
gov=$(go version 2>/dev/null | cut -d' ' -f3-4)
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "machine: $(nproc) cores, ${cpu:-unknown CPU}, $mem RAM; ${gov:-prebuilt binary}"
echo "commit:  $commit; started $(date -u +%Y-%m-%dT%H:%MZ), load average $(load)"

# count N: a size with suffix k, M or G as a plain number.
count() {
  local s=$1 m=1
  case $s in
    *k|*K) m=1000; s=${s%?} ;;
    *M) m=1000000; s=${s%?} ;;
    *G) m=1000000000; s=${s%?} ;;
  esac
  echo $((s * m))
}

fmt_n() { awk -v n="$1" 'BEGIN{ if (n >= 1e6) printf "%.3gM", n/1e6; else if (n >= 1e3) printf "%.3gk", n/1e3; else printf "%d", n }'; }

# timed CMD...: runs CMD once under /usr/bin/time; sets t_wall, t_cpu (user +
# system seconds), t_rss, t_rc, t_out.
timed() {
  local tv="$tmp/time.txt"
  t_out="$tmp/out.txt"
  timeout "$limit" /usr/bin/time -v -o "$tv" "$@" >"$t_out" 2>&1
  t_rc=$?
  t_wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tv" 2>/dev/null | awk -F: '{ if (NF==3) print $1*3600+$2*60+$3; else print $1*60+$2 }')
  t_rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2/1024}' "$tv" 2>/dev/null)
  t_cpu=$(awk -F': ' '/(User|System) time \(seconds\)/ {c += $2} END {printf "%.2f", c}' "$tv" 2>/dev/null)
}

# run NAME LABEL EVENTS NOTE CMD...: times CMD (best of $reps by wall time;
# max RSS of that run) and appends a table row. EVENTS counts what the
# command reads (both traces for cohost, snapshot entries for import).
rows=()
run() {
  local name=$1 label=$2 events=$3 extra=$4; shift 4
  case $only in *" $name "*) ;; *) return ;; esac
  echo "   $label" >&2
  local i wall="" rss="" cpu="" note=""
  for ((i = 0; i < reps; i++)); do
    timed "$@"
    if grep -q 'not built yet\|No help topic\|command not found\|flag provided but not defined' "$t_out"; then
      rows+=("| $label | $(fmt_n "$events") | n/a | n/a | n/a | n/a | not built yet |")
      return
    fi
    if [ "$t_rc" -eq 124 ]; then note="timed out after ${limit}s"; wall=$t_wall; rss=$t_rss; cpu=$t_cpu; break
    elif [ "$t_rc" -ne 0 ]; then note="exit $t_rc: $(grep -v '^\s*$' "$t_out" | tail -1 | cut -c1-80)"; wall=$t_wall; rss=$t_rss; cpu=$t_cpu; break
    fi
    if [ -z "$wall" ] || awk "BEGIN{exit !($t_wall < $wall)}"; then wall=$t_wall; rss=$t_rss; cpu=$t_cpu; fi
  done
  local rate="-"
  if [ -n "$wall" ] && [ -z "$note" ] && awk "BEGIN{exit !($wall > 0)}"; then
    rate=$(awk "BEGIN{printf \"%.1f M\", $events / $wall / 1e6}")
  fi
  [ "$reps" -gt 1 ] && [ -z "$note" ] && note="best of $reps"
  [ -n "$extra" ] && note="${note:+$note; }$extra"
  rows+=("| $label | $(fmt_n "$events") | ${wall:-?} | ${cpu:-?} | ${rss:-?} | $rate | $note |")
}

for s in "${sizes[@]}"; do
  n=$(count "$s")
  reps=${BEST:-$([ "$n" -le 10000000 ] && echo 2 || echo 1)}
  f="$tmp/synth_$s.fst"
  echo "== $s events (best of $reps)" >&2
  # synth is always run (every other row reads its trace), shown if asked for.
  keep=$only; only=" synth "; r=$reps; reps=1
  # shellcheck disable=SC2086
  run synth "synth" "$n" "" "$bin" synth -q -o "$f" --events "$n" --seed "$seed" ${FRAGSIM_EXTRA_SYNTH:-}
  case $keep in *" synth "*) ;; *) unset 'rows[${#rows[@]}-1]' ;; esac
  only=$keep; reps=$r
  if [ ! -s "$f" ]; then echo "scale: synth of $s failed: $(tail -1 "$tmp/out.txt")" >&2; continue; fi
  actual=$("$bin" info --json "$f" 2>/dev/null | sed -n 's/^ *"events": *\([0-9]*\).*/\1/p' | head -1)
  [ -n "$actual" ] && n=$actual
  size=$(stat -c %s "$f")
  echo "   file: $size bytes, $(awk "BEGIN{printf \"%.2f\", $size / $n}") bytes/event" >&2
  run decode "decode (info)" "$n" "" "$bin" info "$f"
  for p in caching expandable pooled bfc ideal paged; do
    run "$p" "replay --policy $p" "$n" "" "$bin" replay --policy "$p" "$f"
  done
  run compare "compare" "$n" "5 policies + setting variants" "$bin" compare "$f"
  run cohost "cohost (2 copies)" "$((2 * n))" "--offset 0,1s --capacity h200" \
    "$bin" cohost --offset 0,1s --capacity h200 "$f" "$f"
  rm -f "$f"

  case $only in *" import "*) ;; *) continue ;; esac
  en=$(count "$s")
  if [ -n "${IMPORT_MAX:-}" ] && [ "$en" -gt "$IMPORT_MAX" ]; then
    rows+=("| import | $(fmt_n "$en") | n/a | n/a | n/a | n/a | above IMPORT_MAX |")
    continue
  fi
  pk="$pickles/snap_$en.pickle"
  if [ ! -s "$pk" ]; then
    echo "   generating $pk" >&2
    "$tmp/genpickle" -o "$pk" -n "$en" || { echo "scale: genpickle failed" >&2; continue; }
  fi
  run import "import" "$en" "commit $commit; $(awk "BEGIN{printf \"%.0f\", $(stat -c %s "$pk") / 1048576}") MiB pickle" \
    "$bin" import -q -o "$tmp/import.fst" "$pk"
  rm -f "$tmp/import.fst"
done

echo "finished $(date -u +%Y-%m-%dT%H:%MZ), load average $(load)"
echo
echo "| command | events | wall s | CPU s | max RSS MiB | events/s | note |"
echo "|---|---:|---:|---:|---:|---:|---|"
printf '%s\n' "${rows[@]}"
