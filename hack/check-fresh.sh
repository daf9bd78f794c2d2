#!/usr/bin/env bash
# The fresh-machine path of make demo and make test, checked on this
# machine without touching its own set-up: the CNI plugins are looked for
# in an empty scratch folder (CNI_BIN_DIR), as on a machine that never had
# them, and
#   1. without apt and without root, make deps fails at once, naming the fix;
#   2. make deps (real apt: a no-op here when the package is installed, the
#      install on a fresh machine) leaves working plugins in the folder —
#      each answers the CNI VERSION command;
#   3. a second make deps is a no-op: it calls apt not at all;
#   4. the node agent started on the folder (epwindow-local up
#      --cni-bin-dir) gets its pod network from them: READY. This step
#      waits for the local cluster's lock like any test.
# Nothing is downloaded except through apt.
set -euo pipefail
cd "$(dirname "$0")/.."

scratch=$(mktemp -d /tmp/epwindow-check-fresh.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
cni="$scratch/cni"
mkdir -p "$cni" "$scratch/bin"
say() { echo "check-fresh: $*"; }
die() {
	echo "check-fresh: FAIL: $*" >&2
	exit 1
}

# 1. Fail fast, naming the fix.
# (the package's own folder is hidden too: an empty one stands in for it)
mkdir -p "$scratch/no-pkg"
if out=$(CNI_BIN_DIR="$cni" CNI_PKG_DIR="$scratch/no-pkg" APT_GET="$scratch/no-apt-get" hack/deps.sh 2>&1); then
	die "make deps without plugins and without apt succeeded: $out"
fi
grep -q "containernetworking-plugins" <<<"$out" || die "make deps without apt does not name the package: $out"
say "no plugins, no apt: $out"
# (the script comes on standard input, opened as root: the clone's folder
# may be one that user cannot read)
if out=$(setpriv --reuid=65534 --regid=65534 --clear-groups env CNI_BIN_DIR="$cni" bash -s <hack/deps.sh 2>&1); then
	die "make deps as a non-root user succeeded: $out"
fi
grep -q "not root" <<<"$out" || die "make deps as non-root does not say root is needed: $out"
say "not root: $out"

# 2. Install (or find) the plugins.
CNI_BIN_DIR="$cni" hack/deps.sh
for p in bridge host-local loopback; do
	[ -x "$cni/$p" ] || die "$p missing in $cni after make deps"
	v=$(CNI_COMMAND=VERSION "$cni/$p" </dev/null) || die "$cni/$p does not run"
	grep -q cniVersion <<<"$v" || die "$cni/$p VERSION said: $v"
done
say "plugins in $cni answer VERSION"

# 2b. make demo's deps (DEPS=demo) skip what only the tests use: on a
# machine without promtool, HAProxy and Chromium (a PATH without them) it
# asks apt for none of them; make deps asks for all three.
mkdir -p "$scratch/path"
for c in go ip nft iptables-restore id uname; do
	ln -s "$(command -v "$c")" "$scratch/path/$c"
done
# (the recorder names its file in full: the PATH here has no dirname)
cat >"$scratch/bin/apt-rec" <<SH
#!/bin/sh
echo "\$*" >>"$scratch/bin/apt-rec.calls"
SH
chmod +x "$scratch/bin/apt-rec"
DEPS=demo PATH="$scratch/path" CNI_BIN_DIR="$cni" APT_GET="$scratch/bin/apt-rec" "$BASH" hack/deps.sh >/dev/null
[ ! -e "$scratch/bin/apt-rec.calls" ] || die "make deps-demo asked apt for $(cat "$scratch/bin/apt-rec.calls")"
PATH="$scratch/path" CNI_BIN_DIR="$cni" APT_GET="$scratch/bin/apt-rec" "$BASH" hack/deps.sh >/dev/null
for p in prometheus haproxy chromium-headless-shell; do
	grep -q "install.* $p" "$scratch/bin/apt-rec.calls" || die "make deps did not ask apt for $p: $(cat "$scratch/bin/apt-rec.calls")"
done
say "deps-demo installs only the cluster's packages; deps adds the tests' (prometheus, haproxy, chromium-headless-shell)"

# 3. Present now: no apt at all.
cat >"$scratch/bin/apt-get" <<'SH'
#!/bin/sh
echo "apt-get $*" >>"$(dirname "$0")/calls"
exit 1
SH
chmod +x "$scratch/bin/apt-get"
CNI_BIN_DIR="$cni" APT_GET="$scratch/bin/apt-get" hack/deps.sh
[ ! -e "$scratch/bin/calls" ] || die "make deps called apt although everything was there: $(cat "$scratch/bin/calls")"
say "second make deps: no apt call"

# 4. The node agent uses them.
[ -x bin/epwindow-local ] || die "bin/epwindow-local missing: make cluster"
up="$scratch/up"
flock /run/epwindow-local-tests.lock bin/epwindow-local up --dir "$up" --cni-bin-dir "$cni" >"$scratch/up.out" 2>"$scratch/up.err" &
pid=$!
for _ in $(seq 1 1500); do
	grep -q '^READY ' "$scratch/up.out" 2>/dev/null && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.2
done
ready=$(grep '^READY ' "$scratch/up.out" || true)
# flock's child gets the signal through flock (it forwards nothing), so
# stop the cluster itself: its pid is the child of flock.
child=$(pgrep -P "$pid" || true)
kill -TERM "${child:-$pid}" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
[ -n "$ready" ] || die "epwindow-local up --cni-bin-dir $cni never got READY: $(tail -5 "$scratch/up.err")"
say "node agent on $cni: $ready"
say "ok"
