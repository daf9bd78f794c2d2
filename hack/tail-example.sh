#!/usr/bin/env bash
# hack/tail-example.sh: the measured tail regression of docs/compare.md.
# On one local cluster, two runs of TRIALS deletions (default 40) with an
# in-cluster load runner on the ClusterIP path: the baseline as it is, then
# the same run where, in a random PCT% of deletions (default 25), kube-proxy
# freezes (SIGSTOP) for FREEZE seconds (30) as soon as measure reports the
# DELETE. A frozen kube-proxy leaves its nftables rules as they are, so new
# connections to the ClusterIP still reach the deleted pod until it runs
# again: those deletions get a window about 30 s longer, the others are
# untouched — a slow mode in some deletions, the kind only compare's tail
# test sees at 40 trials. It ends with epwindow compare of the two runs.
set -euo pipefail
cd "$(dirname "$0")/.."

TRIALS=${TRIALS:-40}
FREEZE=${FREEZE:-30}
PCT=${PCT:-25}
dir=${DIR:-$(mktemp -d /tmp/epwindow-tail.XXXXXX)}
mkdir -p "$dir"

# shellcheck source=hack/lib/cluster.sh
. hack/lib/cluster.sh
cluster_up "$dir" --ingress-poll 1s

run() {
	bin/epwindow measure --kubeconfig "$kubeconfig" --url "$ingress" --ingress-class skipper \
		--observer skipper --observer-url "$routes" --trials "$TRIALS" --trial-jitter 1s \
		--in-cluster-load 1 --quiet-period 2s --out "$1"
}

echo "==> baseline: $TRIALS deletions"
run "$dir/base.jsonl"

proxy=$(pgrep -f "/epwindow-local kube-proxy .*$dir/cluster/" | head -1)
[ -n "$proxy" ] || { echo "kube-proxy of the local cluster not found" >&2; exit 1; }
trap 'kill -CONT "$proxy" 2>/dev/null; cluster_down' EXIT

# inject reads measure's progress (stderr) and passes it on; at each new
# DELETE it draws whether this deletion meets a frozen kube-proxy.
inject() {
	local line last=""
	while IFS= read -r line; do
		printf '%s\n' "$line" >&2
		case $line in
		*"trial: delete — deleting "*)
			pod=${line##*deleting }
			pod=${pod%% *}
			[ "$pod" = "$last" ] && continue
			last=$pod
			if [ $((RANDOM % 100)) -lt "$PCT" ]; then
				echo "$(date -u +%T.%N) $pod" >>"$dir/freezes.log"
				kill -STOP "$proxy" && (sleep "$FREEZE"; kill -CONT "$proxy") &
			fi
			;;
		esac
	done
}

: >"$dir/freezes.log"
echo "==> the same run; in ${PCT}% of deletions kube-proxy freezes for ${FREEZE}s at the DELETE"
run "$dir/new.jsonl" 2> >(inject)
sleep 1 # inject passes on the last lines
echo "    kube-proxy froze in $(wc -l <"$dir/freezes.log") of $TRIALS deletions (pods in $dir/freezes.log)"

echo
echo "==> epwindow compare base.jsonl new.jsonl"
bin/epwindow compare "$dir/base.jsonl" "$dir/new.jsonl" || echo "(compare exited $?)"
