#!/usr/bin/env bash
# The memory of `fragsim export --format memory_viz` against trace length:
# for each size (default 1M and 10M events; `fragsim synth --seed 1`) it
# exports the trace and prints the wall time, peak RSS (/usr/bin/time) and
# snapshot size. The export streams, so the RSS should not grow with the
# events. OLD=path adds the same rows for another fragsim binary.
#
# usage: bench/export.sh [SIZE...]      (FRAGSIM=path uses that binary)
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fragsim-export.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fs=${FRAGSIM:-}
if [ -z "$fs" ]; then
	CGO_ENABLED=0 go build -o "$tmp/fragsim" ./cmd/fragsim
	fs=$tmp/fragsim
fi
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1M 10M)
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); commit $(git rev-parse --short HEAD)"
echo
echo "| binary | events | trace | wall s | max RSS MiB | snapshot MiB |"
echo "|---|---:|---:|---:|---:|---:|"
for n in "${sizes[@]}"; do
	"$fs" synth -q -o "$tmp/t.fst" --events "$n" --seed 1 >/dev/null
	tsize=$(( $(stat -c %s "$tmp/t.fst") >> 20 ))
	for b in "new=$fs" ${OLD:+"old=$OLD"}; do
		label=${b%%=*} bin=${b#*=}
		/usr/bin/time -f '%e %M' -o "$tmp/time" "$bin" export --format memory_viz "$tmp/t.fst" -o "$tmp/s.pickle" 2>/dev/null
		read -r wall rss <"$tmp/time"
		echo "| $label | $n | ${tsize} MiB | $wall | $(( rss / 1024 )) | $(( $(stat -c %s "$tmp/s.pickle") >> 20 )) |"
		rm -f "$tmp/s.pickle"
	done
done
