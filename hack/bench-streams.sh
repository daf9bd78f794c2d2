#!/usr/bin/env bash
# bench-streams.sh: a 10,000-stream reconnect herd against a loopback probe
# in its own process, then the probe killed (load.BenchmarkStreamHerd, about
# a minute): the door delay of the stamps (from the socket read that brought
# an open's 101 or a close's EOF into the client to the stamp), the
# handshake delay for scale, and the client's RSS with every stream open.
# Goals: door delay p99 < 1 ms, RSS ≤ 300 MB (issue 21).
# EPWINDOW_BENCH_STREAMS=N changes the herd.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$GO" test -run '^$' -count 1 -bench '^BenchmarkStreamHerd$' -benchtime 1x ./measure/load/ | tee "$out"

metric() {
	awk -v unit="$1" '/^BenchmarkStreamHerd/ { for (i = 2; i <= NF; i++) if ($i == unit) print $(i-1) }' "$out"
}
ms() { awk -v v="$1" 'BEGIN { printf "%.3f", v / 1e6 }'; }
goal() { awk -v v="$1" 'BEGIN { print (v < 1e6) ? "met" : "NOT met" }'; }
row() {
	printf '  %-32s p50 %10s ms  p99 %10s ms  max %10s ms\n' "$1" \
		"$(ms "$(metric "$2-p50-ns")")" "$(ms "$(metric "$2-p99-ns")")" "$(ms "$(metric "$2-max-ns")")"
}
rss=$(metric client-rss-MiB)
echo
echo "== stream herd: $(metric streams) WebSocket streams opened at once, $(metric failed-opens) failed opens, $(metric herd-open-s) s =="
echo "door delay: from the socket read that brought the event into the client to its stamp"
row "open (the 101's read)" door-open
row "close (the killed probe's EOF)" door-close
echo "  goal p99 < 1 ms: opens $(goal "$(metric door-open-p99-ns)"), closes $(goal "$(metric door-close-p99-ns)")"
echo "for scale, the handshake (stamp − the probe's clock at its 101):"
row "handshake" handshake
printf 'client RSS %s MiB with every stream open, peak %s MiB  (goal ≤ 300 MB = 286 MiB: %s)\n' \
	"$rss" "$(metric client-peak-rss-MiB)" "$(awk -v v="$rss" 'BEGIN { print (v <= 286.1) ? "met" : "NOT met" }')"
