#!/usr/bin/env bash
# bench-streams.sh: two 10,000-stream herds against a loopback probe in its
# own process, ended gracefully (SIGTERM, close frames) and abruptly (the
# probe killed) (load.BenchmarkStreamHerd, about a minute; root, for the
# packet capture): the door delay of the stamps (from the kernel's timestamp
# of the server's segment that carried the event, captured on lo as it was
# sent, to the client's stamp), how late a stamp after the library call
# would be, the handshake delay for scale, and the client's RSS with every
# stream open. Goals: door delay p99 < 1 ms, RSS ≤ 300 MB (issue 21).
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
echo "== stream herds: $(metric streams) WebSocket streams opened at once, twice; $(metric failed-opens) failed opens; $(metric herd-open-s) s to open =="
echo "door delay: from the server's segment carrying the event (kernel timestamp, captured on lo) to its stamp"
echo "  ($(metric graceful-closes) of the first herd's $(metric streams) ends were close frames, the rest the FINs of a probe that exited first; $(metric unmatched-stamps) stamps had no captured segment)"
row "open (the 101)" door-open
row "graceful close (the close frame)" door-close
echo "    $(metric graceful-closes-over-1ms) graceful closes stamped over 1 ms late (a FIN merged into the unread close frame: docs/streams.md)"
row "abrupt end (the FIN or reset)" door-end
echo "  goal p99 < 1 ms: opens $(goal "$(metric door-open-p99-ns)"), graceful closes $(goal "$(metric door-close-p99-ns)"), abrupt ends $(goal "$(metric door-end-p99-ns)")"
echo "what the kernel's receive stamps save: how late a stamp taken after the library call would have been"
row "open" late-open
row "graceful close" late-close
row "abrupt end" late-end
echo "for scale, the handshake (stamp − the probe's clock at its 101):"
row "handshake" handshake
printf 'client RSS %s MiB with every stream open (stacks %s MiB, heap %s MiB), peak %s MiB  (goal ≤ 300 MB = 286 MiB: %s)\n' \
	"$rss" "$(metric client-stacks-MiB)" "$(metric client-heap-MiB)" "$(metric client-peak-rss-MiB)" "$(awk -v v="$rss" 'BEGIN { print (v <= 286.1) ? "met" : "NOT met" }')"
