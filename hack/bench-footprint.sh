#!/usr/bin/env bash
# hack/bench-footprint.sh (make bench): what `epwindow measure` costs the
# cluster it reads, at production size. It starts the local cluster with
# BALLAST Services (default 2000x5: 2,000 Services of 5 endpoints, each
# with an Ingress, so Skipper's route table and kube-proxy's rules have
# production size) and the probe Service over many slices (5 endpoints a
# slice, 30 replicas), runs TRIALS deletions (default 5) through Skipper
# at the default observer interval, and prints against the goals of
# docs/production-size.md: API requests per trial and per minute, the bytes
# read from Skipper a second, the observer's polls over the interval (each
# is followed by a back-off, so polls never overlap), and measure's peak
# RSS and CPU. About 5 minutes on 2 cores, most of it the ballast's start.
# IN_CLUSTER_LOAD=R (runners) and STREAMS=N (WebSocket streams, held by the
# tool and each runner) add the runners' /stats reads through the pod
# proxy, stream logs included, to what is counted (the footprint line's
# pod-proxy reads and bytes).
set -euo pipefail
cd "$(dirname "$0")/.."

BALLAST=${BALLAST:-2000x5}
TRIALS=${TRIALS:-5}
IN_CLUSTER_LOAD=${IN_CLUSTER_LOAD:-0}
STREAMS=${STREAMS:-0}
extra=()
if [ "$IN_CLUSTER_LOAD" -gt 0 ]; then extra+=(--in-cluster-load "$IN_CLUSTER_LOAD"); fi
if [ "$STREAMS" -gt 0 ]; then extra+=(--streams "$STREAMS" --stream-protocol websocket); fi
dir=$(mktemp -d /tmp/epwindow-footprint.XXXXXX)

# shellcheck source=hack/lib/cluster.sh
. hack/lib/cluster.sh
cluster_up "$dir" --ballast "$BALLAST" --max-endpoints-per-slice 5
echo "    READY $(($(date +%s) - up_started)) s after up began"
metrics=$(ready_field kube-proxy-metrics)

echo "==> epwindow measure: $TRIALS deletions of 30 replicas through Skipper, $BALLAST ballast"
bin/epwindow measure --kubeconfig "$kubeconfig" --url "$ingress" --ingress-class skipper \
	--observer skipper --observer-url "$routes" --kube-proxy-metrics "$metrics" \
	--replicas 30 --trials "$TRIALS" --quiet-period 2s --out "$dir/results.jsonl" ${extra[@]+"${extra[@]}"} \
	>"$dir/measure.out" 2>"$dir/measure.err"

header=$(head -1 "$dir/results.jsonl")
# num KEY: the first number after "KEY": in the results header (0 if absent).
num() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p" <<<"$header" | head -1 | grep . || echo 0; }
line=$(grep '^footprint: ' "$dir/measure.err") || { echo "measure printed no footprint line:" >&2; tail -20 "$dir/measure.err" >&2; exit 1; }
rss=$(sed -n 's/.*peak RSS \([0-9.]*\) MiB.*/\1/p' <<<"$line")
valid=$(grep -c '"valid":true' "$dir/results.jsonl" || true)

echo
echo "== footprint of epwindow measure against a $BALLAST-Service local cluster ($(nproc) cores) =="
echo "$line"
echo "trials: $valid valid of $TRIALS"
proxy=$(sed -n 's/.*; \([0-9]*\) pod-proxy reads (\([0-9.]*\) kB).*/\1 \2/p' <<<"$line")
if [ -n "$proxy" ]; then
	read -r preads pkb <<<"$proxy"
	awk -v n="$preads" -v kb="$pkb" -v trials="$TRIALS" 'BEGIN {
		printf "pod proxy: %d reads, %.1f kB (%.1f kB per trial): probe timelines and runner stats, stream logs read from a cursor\n", n, kb, kb / trials
	}'
fi
awk -v rss="$rss" -v bpm="$(num bytes_per_minute)" -v p99="$(num poll_p99_ns)" -v iv="$(num interval_ns)" \
	-v over="$(num overruns)" -v polls="$(num polls)" 'BEGIN {
	printf "peak RSS %.0f MiB: %.2fx the 150 MB goal (%s)\n", rss, rss * 1048576 / 150e6, (rss * 1048576 <= 150e6 ? "met" : "NOT met")
	printf "Skipper reads %.2f MB/s at the %.0f ms interval: %.2fx the 1 MB/s goal (%s)\n", bpm / 60e6, iv / 1e6, bpm / 60e6, (bpm / 60e6 <= 1 ? "met" : "NOT met")
	printf "observer: poll p99 %.0f ms; %d of %d polls over the interval, each followed by a back-off (polls never overlap)\n", p99 / 1e6, over, polls
}'
echo "(files in $dir)"
