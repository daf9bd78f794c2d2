#!/usr/bin/env bash
# bench-streams.sh: a 10,000-stream reconnect herd against a loopback probe
# in its own process (load.BenchmarkStreamHerd, about a minute): the open
# stamp delay at the door (client stamp − the probe's clock as it wrote the
# 101) and the client's RSS with every stream open. Goals: p99 < 1 ms,
# RSS ≤ 300 MB (issue 21). EPWINDOW_BENCH_STREAMS=N changes the herd.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$GO" test -run '^$' -count 1 -bench '^BenchmarkStreamHerd$' -benchtime 1x ./measure/load/ | tee "$out"

metric() {
	awk -v unit="$1" '/^BenchmarkStreamHerd/ { for (i = 2; i <= NF; i++) if ($i == unit) print $(i-1) }' "$out"
}
p99=$(metric stamp-p99-ns)
rss=$(metric client-rss-MiB)
echo
echo "== stream herd: $(metric streams) WebSocket streams opened at once, $(metric failed-opens) failed opens, $(metric herd-open-s) s =="
printf 'open stamp delay   p50 %12s ns  p99 %12s ns  max %12s ns  (goal p99 < 1 ms: %s)\n' \
	"$(metric stamp-p50-ns)" "$p99" "$(metric stamp-max-ns)" "$(awk -v v="$p99" 'BEGIN { print (v < 1000000) ? "met" : "NOT met" }')"
printf 'client RSS         %s MiB with every stream open, peak %s MiB  (goal ≤ 300 MB = 286 MiB: %s)\n' \
	"$rss" "$(metric client-peak-rss-MiB)" "$(awk -v v="$rss" 'BEGIN { print (v <= 286.1) ? "met" : "NOT met" }')"
