#!/usr/bin/env bash
# hack/beside.sh start DIR OWNER CMD...: run CMD in the background, under
# the SCHED_IDLE policy (nice 19 where chrt cannot set it), with its output
# in DIR/log, and return at once. OWNER is the PID of the process the run
# belongs to (make's, $$PPID in a recipe): when it exits before CMD ends
# (a failed phase, Ctrl-C), CMD is killed, so nothing is left running.
# hack/beside.sh wait DIR: wait for CMD, print its output and how long it
# ran, and exit with its status.
#
# make test runs the checks that no later phase needs (the macOS build,
# the statistics simulations) this way beside the e2e phase, whose clusters
# leave about 40% of the 2 cores idle (60% busy, sampled every 10 s over
# a cold run's e2e phase, 2026-12-07) while they wait for grace
# periods, polls and CronJob minutes. A SCHED_IDLE task takes only what no
# other task wants: the scheduler preempts it as soon as a normal task
# wakes (check_preempt_wakeup_fair in kernel/sched/fair.c), so the
# clusters' timing is not shared with it.
set -uo pipefail

case "${1:-}" in
start)
	dir=$2 owner=$3
	shift 3
	rm -rf "$dir" && mkdir -p "$dir" && : >"$dir/log"
	idle=(chrt --idle 0)
	"${idle[@]}" true 2>/dev/null || idle=(nice -n 19)
	# setsid: its own process group, which the watch below kills whole
	# (go build's compiles with it).
	setsid bash -c '
		dir=$1 owner=$2
		shift 2
		start=$(date +%s)
		"$@" >>"$dir/log" 2>&1 &
		cmd=$!
		while kill -0 "$cmd" 2>/dev/null; do
			if ! kill -0 "$owner" 2>/dev/null; then
				echo "beside.sh: its make ($owner) exited: stopped" >>"$dir/log"
				kill -TERM -- -$$
				exit 1
			fi
			sleep 1
		done
		wait "$cmd"
		status=$?
		echo "$(( $(date +%s) - start )) $status" >"$dir/status"
	' beside "$dir" "$owner" "${idle[@]}" "$@" </dev/null >/dev/null 2>&1 &
	;;
wait)
	dir=$2
	while [ ! -e "$dir/status" ]; do
		[ -e "$dir/log" ] || { echo "beside.sh: nothing was started in $dir" >&2; exit 2; }
		sleep 1
	done
	read -r secs status <"$dir/status"
	cat "$dir/log"
	echo "(ran ${secs}s beside the phases before this one, exit $status)"
	exit "$status"
	;;
*)
	echo "usage: hack/beside.sh start DIR OWNER CMD... | wait DIR" >&2
	exit 2
	;;
esac
