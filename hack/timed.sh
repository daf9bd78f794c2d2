#!/usr/bin/env bash
# hack/timed.sh FILE NAME CMD...: run CMD, append "NAME SECONDS STATUS" to
# FILE, and exit with CMD's status; on failure, print the table so far.
# hack/timed.sh --table FILE prints the table: one row per phase, and the
# total, under the heading $TIMED_TITLE (default "make test phases"). make
# test uses it to show where its time goes.
set -uo pipefail

table() {
	awk '{ printf "  %-24s %7.0fs  %s\n", $1, $2, ($3 == 0 ? "ok" : "FAILED (exit " $3 ")"); t += $2 }
		END { printf "  %-24s %7.0fs\n", "total", t }' "$1"
}

if [ "${1:-}" = --table ]; then
	echo "${TIMED_TITLE:-make test phases}:"
	table "$2"
	exit 0
fi
file=$1 name=$2
shift 2
start=$(date +%s.%N)
"$@"
status=$?
end=$(date +%s.%N)
echo "$name $(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }') $status" >>"$file"
if [ "$status" != 0 ]; then
	echo "${TIMED_TITLE:-make test phases} ($name failed):"
	table "$file"
fi
exit "$status"
