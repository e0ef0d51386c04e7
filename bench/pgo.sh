#!/usr/bin/env bash
# Profile-guided optimization of fragsim: makes cmd/fragsim/default.pgo,
# which `go build ./cmd/fragsim` applies on its own (-pgo=auto), from a CPU
# profile of BenchmarkReplayReal on one core (the 13 real H200 traces of
# allocator/caching/testdata/real, 1.07 M events, replayed under caching
# with their recorded settings, decoding included: what `fragsim replay`
# spends its time on).
#
# Usage: bench/pgo.sh profile      writes cmd/fragsim/default.pgo
#        bench/pgo.sh ab [ROUNDS]  builds fragsim with and without the
#          profile (-pgo=off) and the benchmark's test binary with and
#          without it, then runs each pair in turn ROUNDS times (default 7,
#          GOMAXPROCS=1): `fragsim replay --json` of a synthetic trace of
#          5 M events (fragsim synth --seed 1, not one the profile was made
#          from; CPU seconds, user + system), of the 13 real traces and
#          baseline_s1, shared_s1 and train_s1 one by one (CPU seconds of
#          the 16 runs, which process start-up weighs on), and
#          BenchmarkReplayReal (events per CPU-second). Prints every run
#          and the medians.
# Env:   BENCHTIME iterations of the profiled benchmark (default 400x, about
#        20 s: the more samples, the steadier the profile).
set -eu
cd "$(dirname "$0")/.."
mode=${1:-}
case "$mode" in
profile)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	go test -c -o "$tmp/caching.test" ./allocator/caching
	(cd allocator/caching && GOMAXPROCS=1 "$tmp/caching.test" -test.run '^$' \
		-test.bench BenchmarkReplayReal -test.cpu 1 -test.benchtime "${BENCHTIME:-400x}" \
		-test.cpuprofile "$tmp/cpu.pprof")
	cp "$tmp/cpu.pprof" cmd/fragsim/default.pgo
	echo "wrote cmd/fragsim/default.pgo ($(wc -c <cmd/fragsim/default.pgo) bytes)"
	;;
ab)
	rounds=${2:-7}
	[ -f cmd/fragsim/default.pgo ] || { echo "no cmd/fragsim/default.pgo: run bench/pgo.sh profile" >&2; exit 1; }
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	go build -o "$tmp/fragsim.pgo" ./cmd/fragsim
	go build -pgo=off -o "$tmp/fragsim.nopgo" ./cmd/fragsim
	go test -c -pgo=cmd/fragsim/default.pgo -o "$tmp/caching.pgo.test" ./allocator/caching
	go test -c -pgo=off -o "$tmp/caching.nopgo.test" ./allocator/caching
	"$tmp/fragsim.nopgo" synth --seed 1 --events 5M -o "$tmp/synth.fst" >/dev/null
	traces=()
	for f in allocator/caching/testdata/real/*.fst; do traces+=("$f"); done
	for n in baseline_s1 shared_s1 train_s1; do traces+=("traces/$n.fst"); done
	cpu() { # CPU seconds of fragsim replay --json over the traces
		/usr/bin/time -f '%U %S' -o "$tmp/t" bash -c 'for f in "${@:2}"; do GOMAXPROCS=1 "$1" replay --json "$f" >/dev/null; done' _ "$1" "${traces[@]}"
		awk '{printf "%.3f\n", $1+$2}' "$tmp/t"
	}
	bench() { # events/cpu-s of BenchmarkReplayReal -cpu 1
		(cd allocator/caching && GOMAXPROCS=1 "$1" -test.run '^$' -test.bench BenchmarkReplayReal \
			-test.cpu 1 -test.benchtime 10x | awk '/events\/cpu-s/{for(i=1;i<=NF;i++) if($i=="events/cpu-s") print $(i-1)}')
	}
	synth() { # CPU seconds of fragsim replay --json of the synthetic trace
		/usr/bin/time -f '%U %S' -o "$tmp/t" env GOMAXPROCS=1 "$1" replay --json "$tmp/synth.fst" >/dev/null
		awk '{printf "%.3f\n", $1+$2}' "$tmp/t"
	}
	for i in $(seq "$rounds"); do
		echo "synth5M_replay_cpu_s nopgo $(synth "$tmp/fragsim.nopgo")"
		echo "synth5M_replay_cpu_s pgo $(synth "$tmp/fragsim.pgo")"
		echo "real16_replay_cpu_s nopgo $(cpu "$tmp/fragsim.nopgo")"
		echo "real16_replay_cpu_s pgo $(cpu "$tmp/fragsim.pgo")"
		echo "bench_events_per_cpu_s nopgo $(bench "$tmp/caching.nopgo.test")"
		echo "bench_events_per_cpu_s pgo $(bench "$tmp/caching.pgo.test")"
	done | tee "$tmp/runs"
	echo "medians:"
	sort -k1,1 -k2,2 "$tmp/runs" | awk '{k=$1" "$2; v[k]=v[k]" "$3} END{for (k in v) {n=split(v[k],a," "); for(i=1;i<=n;i++) for(j=i+1;j<=n;j++) if(a[j]<a[i]){t=a[i];a[i]=a[j];a[j]=t}; print k, a[int((n+1)/2)]}}' | sort
	;;
*)
	echo "usage: bench/pgo.sh profile | ab [ROUNDS]" >&2
	exit 2
	;;
esac
