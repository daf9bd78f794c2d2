#!/usr/bin/env bash
# make demo: start the local cluster, measure its propagation window through
# Skipper, print the report, tear the cluster down (also on Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."

TRIALS=${TRIALS:-10}
POLL=${POLL:-3s}
dir=$(mktemp -d /tmp/epwindow-demo.XXXXXX)
out="$dir/results.jsonl"

# shellcheck source=hack/lib/cluster.sh
. hack/lib/cluster.sh
cluster_up "$dir" --ingress-poll "$POLL"

# STREAMS=200 make demo: also hold that many WebSocket streams through
# Skipper (STREAM_PROTOCOL, STREAM_DRAIN and RECONNECT change how), so the
# report has its "Long-lived connections" section (docs/streams.md).
streams=()
if [ -n "${STREAMS:-}" ]; then
	streams=(--streams "$STREAMS" --stream-protocol "${STREAM_PROTOCOL:-websocket}"
		--stream-drain "${STREAM_DRAIN:-close-jittered=3s}" --reconnect "${RECONNECT:-grpc-default}")
fi

echo "==> epwindow measure: $TRIALS deletions through Skipper (polls the API every $POLL)${STREAMS:+, $STREAMS streams}"
bin/epwindow measure --kubeconfig "$kubeconfig" --url "$ingress" --ingress-class skipper \
	--observer skipper --observer-url "$routes" --trials "$TRIALS" --quiet-period 2s --out "$out" "${streams[@]}"

if [ -n "${STREAMS:-}" ]; then
	echo
	echo "==> epwindow report (text, with the Long-lived connections section)"
	bin/epwindow report "$out"
fi

echo
echo "==> epwindow report --format markdown (what goes into the platform docs)"
bin/epwindow report --format markdown "$out"

echo
echo "==> epwindow report --format svg and --format html (the picture, and one page to open in a browser)"
bin/epwindow report --format svg "$out" > "$dir/run.svg"
bin/epwindow report --format html "$out" > "$dir/run.html"
echo "the deletion waterfall: $dir/run.svg"
echo "the whole report as one page: $dir/run.html"
