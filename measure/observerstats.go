package measure

import (
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

// headerObserver is the results header's account of the observer: its
// resolution is the spacing the polls kept (the interval, or more after a
// back-off) plus the p99 poll time of the polls made up to steady state,
// since a change can land just after a poll's request reached the
// controller and show only in the next poll's answer.
func headerObserver(obs upstream.Observer, st upstream.PollStats, settings map[string]string) results.Observer {
	return results.Observer{
		Name: obs.Name(), ResolutionNS: int64(st.Resolution()), Settings: settings,
		IntervalNS: int64(st.Interval), Polls: st.Polls, Overruns: st.Overruns,
		PollP99NS: int64(st.P99), PollMaxNS: int64(st.Max), PollSpacingNS: int64(st.Spacing),
		BytesPerMinute: st.BytesPerMinute(),
	}
}
