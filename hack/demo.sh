#!/usr/bin/env bash
# make demo: start the local cluster, measure its propagation window through
# Skipper, print the report, tear the cluster down (also on Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."

TRIALS=${TRIALS:-10}
POLL=${POLL:-3s}
dir=$(mktemp -d /tmp/epwindow-demo.XXXXXX)
out="$dir/results.jsonl"

echo "==> starting the local cluster in $dir (logs: $dir/*.log)"
bin/epwindow-local up --dir "$dir/cluster" --ingress-poll "$POLL" --cni-bin-dir "${CNI_BIN_DIR:-/usr/lib/cni}" >"$dir/up.out" 2>"$dir/up.err" &
cluster=$!
stop() {
	echo "==> tearing the local cluster down"
	kill -TERM "$cluster" 2>/dev/null || true
	wait "$cluster" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 130' INT TERM

for _ in $(seq 1 600); do
	if grep -q '^READY ' "$dir/up.out" 2>/dev/null; then break; fi
	if ! kill -0 "$cluster" 2>/dev/null; then
		echo "local cluster exited before READY:" >&2
		tail -20 "$dir/up.err" >&2
		exit 1
	fi
	sleep 0.2
done
ready=$(grep '^READY ' "$dir/up.out") || { echo "local cluster not READY after 120s" >&2; tail -20 "$dir/up.err" >&2; exit 1; }
echo "    $ready"
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$ready"; }
kubeconfig=$(field kubeconfig)
ingress=$(field ingress)
routes=$(field routes)

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
