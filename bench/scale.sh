#!/usr/bin/env bash
# Scale benchmark: builds fragsim, generates synthetic traces of 1, 10 and 100
# million events (fragsim synth, default multi-agent workload) and times the
# commands that read them with /usr/bin/time -v: wall seconds, max RSS,
# events per second. Prints a markdown table with the machine it ran on.
#
# Usage: bench/scale.sh [SIZE...]     (default: 1M 10M 100M)
# Env:   SEED (default 1), TIMEOUT per command in seconds (default 1200),
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

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fragsim-scale.XXXXXX")
if [ "${KEEP:-0}" != 1 ]; then trap 'rm -rf "$tmp"' EXIT; fi
bin="$tmp/fragsim"
# Builds the committed tree (HEAD), so that other work in progress in the
# checkout does not get in the way; WORKTREE=1 builds the checkout as it is.
if [ -n "${FRAGSIM_BIN:-}" ]; then
  cp "$FRAGSIM_BIN" "$bin"
elif [ "${WORKTREE:-0}" != 1 ] && git rev-parse --verify -q HEAD >/dev/null; then
  mkdir -p "$tmp/src" && git archive HEAD | tar -x -C "$tmp/src"
  (cd "$tmp/src" && CGO_ENABLED=0 go build -o "$bin" ./cmd/fragsim) || { echo "scale: build failed" >&2; exit 1; }
  rm -rf "$tmp/src"
else
  CGO_ENABLED=0 go build -o "$bin" ./cmd/fragsim || { echo "scale: build failed" >&2; exit 1; }
fi

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)
gov=$(go version 2>/dev/null | cut -d' ' -f3-4)
echo "machine: $(nproc) cores, ${cpu:-unknown CPU}, $mem RAM; ${gov:-prebuilt binary}; $(date -u +%Y-%m-%dT%H:%MZ)"
echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo

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

# run LABEL EVENTS CMD...: times CMD, appends a table row.
rows=()
run() {
  local label=$1 events=$2; shift 2
  local out="$tmp/out.txt" tv="$tmp/time.txt" rc
  timeout "$limit" /usr/bin/time -v -o "$tv" "$@" >"$out" 2>&1
  rc=$?
  if grep -q 'not built yet\|No help topic\|command not found\|flag provided but not defined' "$out"; then
    rows+=("| $label | $(fmt_n "$events") | n/a | n/a | n/a | not built yet |")
    return
  fi
  local wall rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tv" | awk -F: '{ if (NF==3) print $1*3600+$2*60+$3; else print $1*60+$2 }')
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2/1024}' "$tv")
  local note=""
  if [ "$rc" -eq 124 ]; then note="timed out after ${limit}s"
  elif [ "$rc" -ne 0 ]; then note="exit $rc: $(grep -v '^\s*$' "$out" | tail -1 | cut -c1-80)"
  fi
  local rate="-"
  if [ -n "$wall" ] && awk "BEGIN{exit !($wall > 0)}"; then
    rate=$(awk "BEGIN{printf \"%.1f M\", $events / $wall / 1e6}")
  fi
  rows+=("| $label | $(fmt_n "$events") | ${wall:-?} | ${rss:-?} | $rate | $note |")
}

fmt_n() { awk -v n="$1" 'BEGIN{ if (n >= 1e6) printf "%.3gM", n/1e6; else printf "%d", n }'; }

for s in "${sizes[@]}"; do
  n=$(count "$s")
  f="$tmp/synth_$s.fst"
  echo "== $s events" >&2
  # shellcheck disable=SC2086
  run "synth" "$n" "$bin" synth -q -o "$f" --events "$n" --seed "$seed" ${FRAGSIM_EXTRA_SYNTH:-}
  if [ ! -s "$f" ]; then echo "scale: synth of $s failed: $(tail -1 "$tmp/out.txt")" >&2; continue; fi
  actual=$("$bin" info --json "$f" 2>/dev/null | sed -n 's/^ *"events": *\([0-9]*\).*/\1/p' | head -1)
  [ -n "$actual" ] && n=$actual
  size=$(stat -c %s "$f")
  echo "   file: $size bytes, $(awk "BEGIN{printf \"%.2f\", $size / $n}") bytes/event" >&2
  run "info" "$n" "$bin" info "$f"
  run "replay --policy caching" "$n" "$bin" replay --policy caching "$f"
  run "replay --policy expandable" "$n" "$bin" replay --policy expandable "$f"
  run "replay --policy pooled" "$n" "$bin" replay --policy pooled "$f"
  run "compare" "$n" "$bin" compare "$f"
  rm -f "$f"
done

echo "| command | events | wall s | max RSS MiB | events/s | note |"
echo "|---|---:|---:|---:|---:|---|"
printf '%s\n' "${rows[@]}"
