#!/usr/bin/env bash
# make deps: check what the local cluster needs before anything long runs,
# and install what apt can install. Runs in a second when all is there.
#
#   CNI_BIN_DIR  where the node agent looks for the CNI plugins bridge,
#                host-local and loopback (default /usr/lib/cni, where
#                Debian's containernetworking-plugins puts them); a
#                different folder gets links to the installed plugins
#   CNI_PKG_DIR  where the package installs them (default /usr/lib/cni)
#   CNI_PKG      the Debian package of the plugins (default
#                containernetworking-plugins; the Makefile passes it)
#   APT_GET      the apt-get to use (default: apt-get on PATH)
#   CHECK_ONLY=1 check, never install: say what is missing and fail
#
# Every failure names its fix and exits 1.
set -euo pipefail

CNI_BIN_DIR=${CNI_BIN_DIR:-/usr/lib/cni}
CNI_PKG_DIR=${CNI_PKG_DIR:-/usr/lib/cni}
CNI_PKG=${CNI_PKG:-containernetworking-plugins}
APT_GET=${APT_GET:-apt-get}
plugins=(bridge host-local loopback)

fail() {
	echo "make deps: $*" >&2
	exit 1
}

[ "$(uname -s)" = Linux ] || fail "the local cluster needs Linux (network namespaces, a bridge, routes); this is $(uname -s)"
# The node agent makes a network namespace per pod, a bridge and an
# unreachable route for the pod network: all need root.
[ "$(id -u)" = 0 ] || fail "not root: the local cluster's node agent creates network namespaces, a bridge and routes; run as root (e.g. sudo make demo)"
command -v go >/dev/null || fail "no go on PATH: install Go 1.26 (https://go.dev/doc/install) and put it on PATH"

missing_plugins() {
	local p
	for p in "${plugins[@]}"; do
		[ -x "$CNI_BIN_DIR/$p" ] || echo "$p"
	done
}

pkgs=()
command -v ip >/dev/null || pkgs+=(iproute2)
# kube-proxy (epwindow-local up --proxy-mode) drives the kernel through the
# nft command (nftables mode, the default) or iptables-restore (iptables).
command -v nft >/dev/null || pkgs+=(nftables)
command -v iptables-restore >/dev/null || pkgs+=(iptables)
# The rest only the tests use; make demo runs up without flags and needs
# none of it (DEPS=demo, make deps-demo): on a fresh machine Chromium and
# Prometheus are most of the download.
if [ "${DEPS:-test}" != demo ]; then
	# promtool checks the alert rules epwindow ships (deploy/monitoring).
	command -v promtool >/dev/null || pkgs+=(prometheus)
	# HAProxy resolves the probe's headless Service through CoreDNS
	# (server-template + resolvers): the DNS path's consumer in the tests.
	command -v haproxy >/dev/null || pkgs+=(haproxy)
	# Headless Chromium opens the HTML reports as a person sees them
	# (results/browsercheck): Debian's chromium-headless-shell.
	command -v chromium-headless-shell >/dev/null || pkgs+=(chromium-headless-shell)
fi
[ -z "$(missing_plugins)" ] || [ -x "$CNI_PKG_DIR/bridge" ] || pkgs+=("$CNI_PKG")

if [ ${#pkgs[@]} -gt 0 ]; then
	[ "${CHECK_ONLY:-}" != 1 ] || fail "missing ${pkgs[*]}: install them (apt-get install ${pkgs[*]}) or run make deps"
	command -v "$APT_GET" >/dev/null ||
		fail "missing ${pkgs[*]} and no apt-get to install them: install Debian's ${pkgs[*]} by hand (the CNI plugins bridge, host-local and loopback into $CNI_BIN_DIR)"
	echo "make deps: installing ${pkgs[*]} (apt)"
	"$APT_GET" update -qq
	DEBIAN_FRONTEND=noninteractive "$APT_GET" install -y -qq "${pkgs[@]}"
fi

# A CNI_BIN_DIR other than the package's gets links to its plugins.
if [ -n "$(missing_plugins)" ]; then
	[ "${CHECK_ONLY:-}" != 1 ] || fail "CNI plugins $(missing_plugins | tr '\n' ' ')missing in $CNI_BIN_DIR: run make deps"
	mkdir -p "$CNI_BIN_DIR"
	for p in $(missing_plugins); do
		[ -x "$CNI_PKG_DIR/$p" ] || fail "CNI plugin $p missing in $CNI_PKG_DIR after installing $CNI_PKG"
		ln -sf "$CNI_PKG_DIR/$p" "$CNI_BIN_DIR/$p"
	done
	echo "make deps: linked the CNI plugins into $CNI_BIN_DIR"
fi
command -v ip >/dev/null || fail "no ip command after installing iproute2"
command -v nft >/dev/null || fail "no nft command after installing nftables"
command -v iptables-restore >/dev/null || fail "no iptables-restore after installing iptables"
