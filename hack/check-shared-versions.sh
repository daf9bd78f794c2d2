#!/usr/bin/env bash
# hack/check-shared-versions.sh: every module that both bin/epwindow and
# bin/epwindow-local build from must be at one version in both Go modules
# (go.mod here and deploy/local/go.mod). Go's build cache keys a compiled
# package by its dependencies' outputs, so one differing version (x/sys,
# protobuf, k8s.io/utils) makes client-go, apimachinery, the API types and
# grpc compile twice on a cold `make demo`: about 560 packages. make test
# runs this in its fmt-check phase; the fix is `go get MODULE@VERSION` in
# the module that is behind, then `go mod tidy` there.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

mods() { CGO_ENABLED=0 "$GO" list -deps -f '{{with .Module}}{{.Path}} {{.Version}}{{end}}' "$@" | sort -u; }
diff=$(join <(mods ./cmd/epwindow) <(cd deploy/local && mods ./cmd/epwindow-local) | awk '$2 != $3 && $1 !~ /^github.com\/epwindow\//')
if [ -n "$diff" ]; then
	echo "modules at different versions in go.mod and deploy/local/go.mod (module, tool, local cluster):"
	echo "$diff"
	echo "align them (go get MODULE@VERSION in the one behind, then go mod tidy): each compiles everything above it twice on a first build"
	exit 1
fi
