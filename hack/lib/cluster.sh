# hack/lib/cluster.sh: sourced by the scripts that start a local cluster of
# their own (demo.sh, tail-example.sh, bench-footprint.sh). cluster_up DIR
# [up flags...] starts bin/epwindow-local up in DIR/cluster, waits for its
# READY line, and sets kubeconfig, ingress and routes from it (up_started:
# when up began); the cluster is torn down when the script exits (Ctrl-C
# included). It runs under the lock the tests take, so it never shares the
# pod network with a test's cluster.
cluster_up() {
	local dir=$1
	shift
	local lock=/run/epwindow-local-tests.lock
	echo "==> starting the local cluster in $dir (logs: $dir/*.log)"
	flock -n "$lock" true || echo "    waiting for another local cluster (a test's?) to stop: $lock"
	flock "$lock" sh -c 'touch "$0/locked" && exec "$@"' "$dir" bin/epwindow-local up --dir "$dir/cluster" \
		--cni-bin-dir "${CNI_BIN_DIR:-/usr/lib/cni}" "$@" >"$dir/up.out" 2>"$dir/up.err" &
	cluster=$!
	trap cluster_down EXIT
	trap 'exit 130' INT TERM
	while [ ! -e "$dir/locked" ] && kill -0 "$cluster" 2>/dev/null; do sleep 0.5; done
	up_started=$(date +%s) # the lock is ours: up has started
	local i
	for i in $(seq 1 900); do
		if grep -q '^READY ' "$dir/up.out" 2>/dev/null; then break; fi
		if ! kill -0 "$cluster" 2>/dev/null; then
			echo "local cluster exited before READY:" >&2
			tail -20 "$dir/up.err" >&2
			exit 1
		fi
		sleep 0.2
	done
	ready=$(grep '^READY ' "$dir/up.out") || {
		echo "local cluster not READY after 180s" >&2
		tail -20 "$dir/up.err" >&2
		exit 1
	}
	echo "    $ready"
	kubeconfig=$(ready_field kubeconfig)
	ingress=$(ready_field ingress)
	routes=$(ready_field routes)
}

ready_field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$ready"; }

cluster_down() {
	echo "==> tearing the local cluster down"
	# flock runs up as its child: signal up itself, so it cleans up.
	pkill -TERM -P "$cluster" 2>/dev/null || true
	kill -TERM "$cluster" 2>/dev/null || true
	wait "$cluster" 2>/dev/null || true
}
