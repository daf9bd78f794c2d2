#!/usr/bin/env bash
# hack/build-estimate.sh: make demo runs it before anything long. When the
# local cluster's binaries are not built yet (make -q cluster-skipper
# fails), it says how long the first build will take on this machine and
# that it happens once; otherwise it prints nothing.
#
# The estimate is fitted to what was measured on a fresh 2-core, 24 GiB
# Debian 12 VM on 2026-12-01: make demo took 28 min 30 s (apt, module
# downloads, the cold Kubernetes and Skipper builds), 37 CPU-minutes. With
# s the part that does not spread over cores (downloads, links, the
# compiles that wait for others) and p the part that does, s + p = 37 and
# s + p/2 = 28 give minutes ≈ 19 + 18 / cores: 37 on one core, 28 on two,
# 23 on four, no less than 19 however many cores.
set -euo pipefail
cd "$(dirname "$0")/.."

if ${MAKE:-make} -q --no-print-directory cluster-skipper 2>/dev/null; then
	exit 0
fi
cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
minutes=$(( 19 + (18 + cores - 1) / cores ))
cat <<MSG
==> first build of the local cluster (Kubernetes v1.37.2 and Skipper, from source): about
    $minutes min on this machine ($cores cores; measured 28 min on a fresh 2-core VM, downloads
    included). It happens once: later runs reuse bin/ and Go's build cache and start in seconds.
    Compiled packages are listed as they build.
MSG
