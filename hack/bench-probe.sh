#!/bin/sh
# bench-probe.sh: the probe's figures, in one run (make bench).
#  1. Throughput: the probe vs a bare net/http hello handler under the same
#     load (in-process load generator, loopback), paired rounds; prints the
#     req/s ratio (goal >= 0.9).
#     The keep-alive rounds run under the CPU profiler; the summary prints
#     the probe handler's own per-request cost (the frames under its
#     ServeHTTP) and where the process's CPU went, so a regression shows
#     where it came from.
#  2. Memory: live heap after 10^4 ... 10^6 requests from 10^4 distinct peer
#     addresses (127.1.x.y); goal: flat once every peer has been seen.
# Both share this machine's CPU with whatever else runs: on a busy machine the
# wall-clock req/s follow the CPU share the benchmark gets, so the ratio is
# also printed per CPU-second of the benchmark process, which does not.
set -eu
cd "$(dirname "$0")/.."
GO=${GO:-go}
ROUNDS=${ROUNDS:-9}
out=$(mktemp)
prof=$(mktemp -d)
trap 'rm -rf "$out" "$prof"' EXIT

"$GO" test -run '^$' -count 1 -bench '^BenchmarkProbeVsBare$' -benchtime "${ROUNDS}x" ./probe/ | tee "$out"
"$GO" test -run '^$' -count 1 -bench '^BenchmarkProbeVsBare/keepalive$' -benchtime 3x \
	-cpuprofile "$prof/cpu.out" -o "$prof/probe.test" ./probe/ >/dev/null
"$GO" test -run '^$' -count 1 -bench '^BenchmarkProbeHeapPeers$' -benchtime 1x ./probe/ | tee -a "$out"

# metric NAME-REGEX UNIT: the value printed before UNIT on the matching line.
metric() {
	awk -v name="$1" -v unit="$2" '$1 ~ name { for (i = 2; i <= NF; i++) if ($i == unit) print $(i-1) }' "$out"
}
echo
echo "== probe benchmark summary =="
for shape in keepalive conn-per-request; do
	printf '%-17s probe %s req/s, bare %s req/s: ratio probe/bare = %s (goal >= 0.9)\n' \
		"$shape:" "$(metric "/$shape" probe-req/s)" "$(metric "/$shape" bare-req/s)" "$(metric "/$shape" ratio)"
	printf '%-17s probe %s req/cpu-s, bare %s req/cpu-s: ratio = %s (CPU cost; robust on a busy machine)\n' \
		"" "$(metric "/$shape" probe-req/cpu-s)" "$(metric "/$shape" bare-req/cpu-s)" "$(metric "/$shape" cpu-ratio)"
done
printf 'heap (MiB, live after GC): before %s' "$(metric HeapPeers heap-MB@0)"
for n in 1e4 1e5 2.5e5 5e5 1e6; do
	printf ', after %s req %s' "$n" "$(metric HeapPeers "heap-MB@$n")"
done
printf '\n  (10^4 peers; %s recorded individually, %s accepts from the rest counted as overflow; %s req/s)\n' \
	"$(metric HeapPeers peers-recorded)" "$(metric HeapPeers peer-overflow-accepts)" "$(metric HeapPeers req/s)"
echo
echo "== probe keep-alive CPU profile (3 paired rounds; the probe's handler, cumulative) =="
"$GO" tool pprof -top -cum -nodecount 12 -focus 'probe\.\(\*server\)\.ServeHTTP' "$prof/probe.test" "$prof/cpu.out" 2>/dev/null | sed -n '/flat%/,$p'
echo "== the whole process (probe, bare handler and load generator), top 12 cumulative =="
"$GO" tool pprof -top -cum -nodecount 12 "$prof/probe.test" "$prof/cpu.out" 2>/dev/null | sed -n '/flat%/,$p'
