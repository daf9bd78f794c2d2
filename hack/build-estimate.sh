#!/usr/bin/env bash
# hack/build-estimate.sh: make demo runs it before anything long. When the
# local cluster's binaries are not built yet (make -q cluster-skipper
# fails), it says how long the first build will take on this machine and
# that it happens once; otherwise it prints nothing.
#
# The estimate is fitted to what was measured on this project's 2-core,
# 24 GiB Debian 12 VM on 2026-12-02: a cold make demo (fresh clone, empty
# Go caches, module downloads included) took 11 min 57 s, 20.6 CPU-minutes
# (docs/local-cluster.md, "The first build"). With s the part that does not
# spread over cores (downloads, links, the compiles that wait for others)
# and p the part that does, s + p = 20.6 and s + p/2 = 12 give
# minutes ≈ 3.4 + 17.2 / cores; rounded up, 4 + 17 / cores: 21 on one core,
# 13 on two, 9 on four. apt, when deps has to install, comes on top.
set -euo pipefail
cd "$(dirname "$0")/.."

if ${MAKE:-make} -q --no-print-directory cluster-skipper 2>/dev/null; then
	exit 0
fi
cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
minutes=$(( 4 + (17 + cores - 1) / cores ))
cat <<MSG
==> first build of the local cluster (Kubernetes v1.37.2 and Skipper, from source): about
    $minutes min on this machine ($cores cores), downloads included; a 2-core VM with empty Go
    caches measured 12 min for all of make demo. It happens once: later runs reuse bin/ and
    Go's build cache and start in seconds. Compiled packages are listed as they build.
MSG
