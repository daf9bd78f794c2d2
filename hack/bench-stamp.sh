#!/usr/bin/env bash
# bench-stamp.sh: what stamping a watch event costs while measure's watchers
# follow a Service of 5,000 endpoints (50 EndpointSlices of 100) on the local
# cluster, under 1,000 updates from 4 writers (measure.BenchmarkWatchStamp,
# about 30 seconds with the cluster start). Needs bin/epwindow-local
# (make cluster) and root, like the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$GO" test -run '^$' -count 1 -bench '^BenchmarkWatchStamp$' -benchtime 1x ./measure/ | tee "$out"

# metric UNIT: the value printed before UNIT.
metric() {
	awk -v unit="$1" '/^BenchmarkWatchStamp/ { for (i = 2; i <= NF; i++) if ($i == unit) print $(i-1) }' "$out"
}
row() { # label name unit note
	printf '%-34s p50 %10s %s  p99 %10s %s  max %10s %s  %s\n' "$1" \
		"$(metric "$2-p50-$3")" "$3" "$(metric "$2-p99-$3")" "$3" "$(metric "$2-max-$3")" "$3" "$4"
}
echo
echo "== watch-event stamping, 5,000-endpoint Service, $(metric events) events =="
p99=$(metric stamp-p99-ns)
verdict=$(awk -v v="$p99" 'BEGIN { print (v < 1000000) ? "met" : "NOT met" }')
row "stamp (at the door, before queues)" stamp ns "(goal p99 < 1 ms: $verdict)"
row "queueing a handler stamp would add" queue ns ""
row "handler (scan of 5,000 endpoints)" handle ns ""
row "update response -> event arrival" deliver ms "(API server watch fan-out)"
