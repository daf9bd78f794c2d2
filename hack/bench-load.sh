#!/usr/bin/env bash
# bench-load.sh — epwindow's load generator (measure/load) against vegeta at
# equal rate, connection cap and timeout, against the same target: one
# `epwindow probe` on loopback. Prints achieved rate and latency of both, and
# the ratios epwindow/vegeta (goals: rate ≥ 1.0×, latency p50/p99 ≤ 1.1×),
# once with keep-alive and once with a new connection per request.
#
#   make bench                       # or: hack/bench-load.sh
#   RATE=2000 DURATION=5s ROUNDS=3 CONNS=2000 hack/bench-load.sh   (defaults: 1000, 2s, 10, 1000)
#
# vegeta is installed from the Go module proxy into .cache/bin (gitignored).
# Both tools' latency runs to the last body byte; epwindow's counts from each
# request's scheduled instant, so its own dispatch lag is included.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
VEGETA_VERSION=v12.13.0
RATE=${RATE:-1000}
# Ten short rounds rather than one long one: on a shared machine the tail
# (p99) of one run is set by whatever else ran then; the median over rounds
# that alternate between the tools is what the two tools share.
DURATION=${DURATION:-2s}
ROUNDS=${ROUNDS:-10}
CONNS=${CONNS:-1000}
TIMEOUT=${TIMEOUT:-5s}
CACHE_BIN=$PWD/.cache/bin
EPWINDOW=${EPWINDOW:-bin/epwindow}

if [ ! -x "$EPWINDOW" ]; then
	echo "bench-load: $EPWINDOW is missing: run make build" >&2
	exit 1
fi
mkdir -p "$CACHE_BIN"
if [ ! -x "$CACHE_BIN/vegeta" ] || [ "$(cat "$CACHE_BIN/vegeta.version" 2>/dev/null)" != "$VEGETA_VERSION" ]; then
	echo "bench-load: installing vegeta $VEGETA_VERSION into .cache/bin"
	GOBIN=$CACHE_BIN $GO install "github.com/tsenart/vegeta/v12@$VEGETA_VERSION"
	echo "$VEGETA_VERSION" >"$CACHE_BIN/vegeta.version"
fi
$GO build -o "$CACHE_BIN/loadbench" ./hack/loadbench
VEGETA=$CACHE_BIN/vegeta
LOADBENCH=$CACHE_BIN/loadbench

tmp=$(mktemp -d)
probe_pid=
cleanup() {
	if [ -n "$probe_pid" ]; then
		kill "$probe_pid" 2>/dev/null || true
		wait "$probe_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

# Start the probe on a free loopback port (a port can be taken between the
# check and the bind: retry).
url=
for _ in 1 2 3 4 5 6 7 8 9 10; do
	port=$((20000 + RANDOM % 30000))
	"$EPWINDOW" probe --listen "127.0.0.1:$port" --pod-name bench --termination-log "" --exit-on-sigterm \
		>"$tmp/probe.log" 2>&1 &
	probe_pid=$!
	for _ in $(seq 50); do
		# bash's /dev/tcp: listening is all that is asked, and curl may be missing.
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			url="http://127.0.0.1:$port/"
			break 2
		fi
		kill -0 "$probe_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill "$probe_pid" 2>/dev/null || true
	wait "$probe_pid" 2>/dev/null || true
	probe_pid=
done
if [ -z "$url" ]; then
	echo "bench-load: the probe did not come up; its log:" >&2
	cat "$tmp/probe.log" >&2
	exit 1
fi

echo "load generator vs vegeta $VEGETA_VERSION: GET $url (epwindow probe), $RATE req/s for $DURATION per tool" \
	"and round, $ROUNDS rounds, ≤ $CONNS connections, timeout $TIMEOUT;" \
	"$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# `time` writes "<user> <sys>" CPU seconds of each tool's run next to its result.
TIMEFORMAT='%3U %3S'
run_vegeta() { # mode keepalive round
	local out=$tmp/vegeta-$1-$3
	{ time "$VEGETA" attack -rate="$RATE/1s" -duration="$DURATION" -timeout="$TIMEOUT" \
		-connections="$CONNS" -max-connections="$CONNS" -max-workers="$CONNS" -keepalive="$2" \
		-http2=false -max-body=0 -redirects=-1 -output="$out.bin" <<<"GET $url"; } 2>"$out.json.cpu"
	"$VEGETA" report -type=json "$out.bin" >"$out.json"
}
run_epwindow() { # mode keepalive round
	local out=$tmp/epwindow-$1-$3
	{ time "$LOADBENCH" run -url "$url" -rate "$RATE" -duration "$DURATION" -timeout "$TIMEOUT" \
		-conns "$CONNS" -keepalive="$2" >"$out.json"; } 2>"$out.json.cpu"
}

# Rounds alternate which tool goes first, so a drift in the machine's load
# does not always favour the same one; the ratios are of the medians.
header=-header=true
for mode in keepalive newconn; do
	keepalive=true
	[ "$mode" = newconn ] && keepalive=false
	vs= es=
	for round in $(seq "$ROUNDS"); do
		if [ $((round % 2)) = 1 ]; then
			run_vegeta "$mode" "$keepalive" "$round"
			run_epwindow "$mode" "$keepalive" "$round"
		else
			run_epwindow "$mode" "$keepalive" "$round"
			run_vegeta "$mode" "$keepalive" "$round"
		fi
		vs+=${vs:+,}$tmp/vegeta-$mode-$round.json
		es+=${es:+,}$tmp/epwindow-$mode-$round.json
	done
	"$LOADBENCH" compare -mode "$mode" "$header" -vegeta "$vs" -epwindow "$es"
	header=-header=false
done
