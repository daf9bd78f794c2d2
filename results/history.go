package results

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// A history is the runs of one cluster in the order they ran (a scheduled
// measure appends one every few hours). Drift compares the newest run, and
// the runs just before it, with a pooled baseline of older trials: a slow
// mode in 10% of deletions needs about 120 trials a side to be seen
// (docs/compare.md), far more than one scheduled run holds, so both sides
// pool runs.
//
// The history splits into segments wherever the settings that shape the
// window change (Settings: the Kubernetes version, the controller and its
// version and settings, the route, the observers, the hold): trials of
// different settings are never pooled, and a change of settings is
// reported as the segment boundary, not judged as drift. Within the newest
// segment each run in turn is tested (replayed from the stored runs, so no
// state is kept beside them): the window side is the newest runs up to
// WindowTrials, the baseline the BaselineTrials before them. Once a run is
// judged worse, the baseline stays where it was before that run's window
// (the detected change), so a regression that persists keeps being
// reported instead of becoming the new normal; a change of settings
// starts afresh.

// Settings are the settings of a run that shape its window, as "name=value"
// in a fixed order: what the operator configures (versions, controllers,
// their flags, the route, the observers and their poll interval,
// kube-proxy's mode and sync periods, the hold), never what a run happened
// to observe (observedSetting): runs that differ only in those are pooled.
type Settings []string

// observedSetting reports whether an observer setting reports what the run saw,
// not what anybody set: the DNS answers' TTLs ("ttl", the longest one
// seen, and "ttl_seen", their range when a cache answered with the time
// its copy had left). A cache makes them differ from run to run; as
// settings they would make every run its own segment, and nothing would
// ever be judged.
func observedSetting(key string) bool { return key == "ttl" || key == "ttl_seen" }

// SettingsOf reads the settings of a run from its header.
func SettingsOf(h *Header) Settings {
	if h == nil {
		return nil
	}
	var s Settings
	add := func(name, v string) {
		if v != "" {
			s = append(s, name+"="+v)
		}
	}
	add("kubernetes", h.ServerVersion)
	add("ingress.class", h.Ingress.Class)
	add("ingress.controller", h.Ingress.Controller)
	add("ingress.version", h.Ingress.Version)
	for _, k := range slices.Sorted(maps.Keys(h.Ingress.Settings)) {
		add("ingress."+k, h.Ingress.Settings[k])
	}
	// Files before the route was recorded were all through an Ingress.
	add("route.kind", cmp.Or(h.Route.Kind, RouteKindIngress))
	add("route.controller", h.Route.Controller)
	add("route.gateway_class", h.Route.GatewayClass)
	for _, o := range h.Observers {
		// An observer is a setting by itself: one without an interval
		// (the DNS observer's, in older files) is still named.
		add("observer."+o.Name, cmp.Or(fmtDurIf(o.IntervalNS), "on"))
		for _, k := range slices.Sorted(maps.Keys(o.Settings)) {
			if !observedSetting(k) {
				add("observer."+o.Name+"."+k, o.Settings[k])
			}
		}
	}
	if kp := h.KubeProxy; kp != nil {
		add("kube_proxy.mode", kp.Mode)
		add("kube_proxy.sync_period", fmtDurIf(kp.SyncPeriodNS))
		add("kube_proxy.min_sync_period", fmtDurIf(kp.MinSyncPeriodNS))
	}
	add("mode", h.Mode)
	// A team's own workload is another thing measured than the probe.
	if h.Target != nil {
		add("target", h.Target.String())
	}
	add("hold", fmtDurIf(h.HoldNS))
	if h.InClusterLoad > 0 {
		add("in_cluster_load", strconv.Itoa(h.InClusterLoad))
	}
	return s
}

func fmtDurIf(ns int64) string {
	if ns == 0 {
		return ""
	}
	return fmtDur(ns)
}

// Changes lists what differs from before to s: "name: old → new", with
// "(none)" for a setting one side lacks.
func (s Settings) Changes(before Settings) []string {
	split := func(ss Settings) map[string]string {
		m := map[string]string{}
		for _, kv := range ss {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		return m
	}
	a, b := split(before), split(s)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(mergeKeys(a, b))) {
		if a[k] != b[k] {
			out = append(out, fmt.Sprintf("%s: %s → %s", k, orNone(a[k]), orNone(b[k])))
		}
	}
	return out
}

func mergeKeys(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// HistoryRun is one run of a history: its name (the file's) and content.
type HistoryRun struct {
	Name string
	File *File
}

// pooled is one closed Summary of the trials of runs idx, renumbered so
// that trial numbers stay distinct.
func pooled(runs []HistoryRun, idx []int) *Summary {
	var h *Header
	if len(idx) > 0 {
		h = runs[idx[len(idx)-1]].File.Header
	}
	s := NewSummary(h, Options{})
	n := 0
	for _, i := range idx {
		for _, r := range runs[i].File.Trials {
			n++
			r.Trial = n
			s.Add(&r)
		}
	}
	s.Close()
	return s
}
