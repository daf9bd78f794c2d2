package lint

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// Options are what Check holds workloads to.
type Options struct {
	Target Target
	// HTTPSleeps are preStop httpGet paths and how long each takes to
	// answer (--http-prestop /prestop=10s).
	HTTPSleeps map[string]time.Duration
	// Ignore are rule IDs not to check (--ignore).
	Ignore map[string]bool
}

// Finding is one rule broken by one object.
type Finding struct {
	Rule    string `json:"rule"`
	Name    string `json:"name"`
	Level   Level  `json:"level"`
	Message string `json:"message"`
	Fix     string `json:"fix"`
	// Object is "Kind namespace/name".
	Object    string `json:"object"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	ObjName   string `json:"object_name"`
	// File and Position locate the finding in a file input; Field is the
	// field it is about, for every input.
	File string `json:"file,omitempty"`
	Position
	Field string `json:"field,omitempty"`
	// Waived is the reason of the waiver annotation that silences it.
	Waived string `json:"waived,omitempty"`
}

// Location is file:line:column for a file, else namespace/name.
func (f *Finding) Location() string {
	switch {
	case f.File != "" && f.Line > 0:
		return fmt.Sprintf("%s:%d:%d", f.File, f.Line, f.Column)
	case f.File != "":
		return f.File
	case f.Namespace != "":
		return f.Namespace + "/" + f.ObjName
	}
	return f.ObjName
}

// defaultGraceSeconds is terminationGracePeriodSeconds when a pod spec
// leaves it out (k8s.io/api core/v1 DefaultTerminationGracePeriodSeconds).
const defaultGraceSeconds = corev1.DefaultTerminationGracePeriodSeconds

// defaultDeregistrationDelay is an AWS target group's
// deregistration_delay.timeout_seconds unless set (ELBv2 API reference,
// TargetGroupAttribute).
const defaultDeregistrationDelay = 300 * time.Second

// checker collects findings over one Check.
type checker struct {
	o        Options
	findings []Finding
	// cover is each serving workload's longest termination delay.
	cover map[*Object]time.Duration
}

// Check runs every rule over objs and returns the findings, waived ones
// included (Waived set), sorted by file, position, then object. An error is
// a workload whose pod template does not decode.
func Check(objs []*Object, o Options) ([]Finding, error) {
	ck := &checker{o: o, cover: map[*Object]time.Duration{}}
	var services []*Object
	for _, obj := range objs {
		if obj.Kind == "Service" && obj.APIVersion == "v1" {
			services = append(services, obj)
		}
	}
	svcs := map[*Object]*corev1.Service{}
	for _, s := range services {
		svc := &corev1.Service{}
		if err := decodeInto(s.Raw, svc); err != nil {
			return nil, fmt.Errorf("%s: %w", s.Ref(), err)
		}
		svcs[s] = svc
	}
	var wls []*workload
	for _, obj := range objs {
		w, ok, err := asWorkload(obj)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		wls = append(wls, w)
		selected := false
		for s, svc := range svcs {
			if w.selectedBy(svc, s.Namespace) {
				selected = true
			}
		}
		ck.pod(w, selected)
	}
	ck.loadBalancers(objs, svcs, wls)
	ck.headlessNotReady(svcs, wls)
	ck.waive(objs, wls)
	slices.SortStableFunc(ck.findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column),
			cmp.Compare(a.Object, b.Object), cmp.Compare(a.Rule, b.Rule))
	})
	return ck.findings, nil
}

// add records a finding for obj at path.
func (ck *checker) add(obj *Object, id string, path []any, format string, a ...any) *Finding {
	if ck.o.Ignore[id] {
		return nil
	}
	r := mustRule(id)
	f := Finding{
		Rule: r.ID, Name: r.Name, Level: r.Level, Fix: r.Fix,
		Message: fmt.Sprintf(format, a...),
		Object:  obj.Ref(), Kind: obj.Kind, Namespace: obj.Namespace, ObjName: obj.Name,
		File: obj.File, Field: fieldPath(path),
	}
	f.Position = Locate(obj.Node, path)
	ck.findings = append(ck.findings, f)
	return &ck.findings[len(ck.findings)-1]
}

// fix replaces a finding's generic fix with a concrete one.
func fix(f *Finding, format string, a ...any) {
	if f != nil {
		f.Fix = fmt.Sprintf(format, a...)
	}
}

// fieldPath renders ["spec","containers",0,"name"] as spec.containers[0].name.
func fieldPath(path []any) string {
	var b strings.Builder
	for _, s := range path {
		switch v := s.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(v)
		case int:
			b.WriteString("[" + strconv.Itoa(v) + "]")
		}
	}
	return b.String()
}

// annotationPath is where annotation key sits: in the pod template when it
// is there, else on the object.
func (w *workload) annotationPath(key string) []any {
	if _, ok := w.template.Annotations[key]; ok {
		return w.path("metadata", "annotations", key)
	}
	return []any{"metadata", "annotations", key}
}

// pod runs the pod-template rules over one workload.
func (ck *checker) pod(w *workload, selected bool) {
	spec := &w.template.Spec
	t := ck.o.Target
	var delay time.Duration
	if v, ok := w.annotations[AnnotationShutdownDelay]; ok {
		d, ok := annotationDuration(v)
		if !ok {
			ck.add(w.obj, RuleAnnotationSyntax, w.annotationPath(AnnotationShutdownDelay),
				"%s %q is not a duration such as 15s (at most 4 parts of up to 5 digits, not negative)", AnnotationShutdownDelay, v)
		} else {
			delay = d
		}
	}
	if v, ok := w.annotations[AnnotationStreamDrain]; ok {
		d, ok := annotationDuration(v)
		if !ok {
			ck.add(w.obj, RuleAnnotationSyntax, w.annotationPath(AnnotationStreamDrain),
				"%s %q is not a duration such as 20s (at most 4 parts of up to 5 digits, not negative)", AnnotationStreamDrain, v)
		} else if d > t.Drain {
			// Streams drain after SIGTERM alongside requests: the longer
			// of the two is what the grace period must cover.
			t.Drain = d
		}
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		at := w.path("spec", "containers", i)
		if why := shellPID1(c); why != "" {
			ck.add(w.obj, RuleShellPID1, append(at, "command"), "container %s: %s", c.Name, why)
		}
		if l, r := c.LivenessProbe, c.ReadinessProbe; l != nil && r != nil &&
			equality.Semantic.DeepEqual(l.ProbeHandler, r.ProbeHandler) && failAfter(l) <= failAfter(r) {
			ck.add(w.obj, RuleProbesShared, append(at, "livenessProbe"),
				"container %s: liveness fails after %ds on the readiness endpoint, readiness after %ds",
				c.Name, failAfter(l), failAfter(r))
		}
	}
	serving := w.servingContainers(selected)
	if len(serving) == 0 {
		return // a worker: nothing routes to it
	}
	need := time.Duration(t.PreStopSeconds()) * time.Second
	var cover time.Duration
	for _, i := range serving {
		c := &spec.Containers[i]
		at := w.path("spec", "containers", i)
		if c.ReadinessProbe == nil {
			ck.add(w.obj, RuleReadinessProbe, at, "container %s serves (ports or a Service) but has no readinessProbe", c.Name)
		}
		hook, kind, desc := preStopLength(c, ck.o.HTTPSleeps)
		hookAt := append(at, "lifecycle", "preStop")
		if kind == hookExec && w.distroless(c) {
			ck.add(w.obj, RuleDistrolessExec, append(hookAt, "exec"),
				"container %s: preStop %s in distroless image %s", c.Name, desc, c.Image)
			hook, kind = 0, hookUnknown // it fails: no delay at all; reported here only
			desc = ""
		}
		var have time.Duration
		switch kind {
		case hookNone:
			if delay == 0 {
				fix(ck.add(w.obj, RulePreStopMissing, at, "container %s has no preStop hook and no %s annotation", c.Name, AnnotationShutdownDelay),
					"add lifecycle.preStop.sleep.seconds: %d (or annotate the pod %s if the app keeps serving after SIGTERM)", t.PreStopSeconds(), AnnotationShutdownDelay)
				continue
			}
			have = delay
			if have < need {
				ck.add(w.obj, RulePreStopShort, w.annotationPath(AnnotationShutdownDelay),
					"container %s: in-app delay %s < %ds (%s)", c.Name, delay, t.PreStopSeconds(), t.From)
			}
		case hookKnown, hookExec:
			have = satAdd(hook, delay)
			if have < need {
				extra := ""
				if delay > 0 {
					extra = fmt.Sprintf(" + in-app delay %s", delay)
				}
				fix(ck.add(w.obj, RulePreStopShort, hookAt, "container %s: preStop %s%s = %s < %ds (%s)",
					c.Name, desc, extra, have, t.PreStopSeconds(), t.From),
					"set lifecycle.preStop.sleep.seconds: %d", ceilSeconds(need-delay))
			}
		case hookUnknown:
			have = delay
			if desc != "" {
				ck.add(w.obj, RulePreStopUnknown, hookAt, "container %s: preStop %s: its length is unknown", c.Name, desc)
			}
		}
		cover = max(cover, have)
	}
	ck.cover[w.obj] = cover
	want := t.GraceSeconds(cover)
	got, note, at := int64(defaultGraceSeconds), " (the default)", w.path("spec")
	if spec.TerminationGracePeriodSeconds != nil {
		got, note, at = *spec.TerminationGracePeriodSeconds, "", w.path("spec", "terminationGracePeriodSeconds")
	}
	if got < want {
		fix(ck.add(w.obj, RuleGraceShort, at, "terminationGracePeriodSeconds %d%s < preStop %ds + drain %s + headroom %s = %ds",
			got, note, max(ceilSeconds(cover), t.PreStopSeconds()), t.Drain, t.Headroom, want),
			"set terminationGracePeriodSeconds: %d", want)
	}
}

// failAfter is how long a probe takes to give up on a broken endpoint:
// failureThreshold × periodSeconds (API defaults 3 and 10).
func failAfter(p *corev1.Probe) int32 {
	ft, ps := p.FailureThreshold, p.PeriodSeconds
	if ft == 0 {
		ft = 3
	}
	if ps == 0 {
		ps = 10
	}
	return ft * ps
}

// waive marks findings whose object carries a waiver annotation for their
// rule; a waiver without a reason waives nothing and is itself a finding.
func (ck *checker) waive(objs []*Object, wls []*workload) {
	annos := map[string]map[string]string{} // Object ref → annotations
	byRef := map[string]*Object{}
	for _, o := range objs {
		byRef[o.Ref()] = o
		annos[o.Ref()] = annotations(o)
	}
	for _, w := range wls {
		annos[w.obj.Ref()] = w.annotations
	}
	var extra []Finding
	for i := range ck.findings {
		f := &ck.findings[i]
		r := mustRule(f.Rule)
		for _, key := range []string{WaiverPrefix + r.ID, WaiverPrefix + r.Name} {
			reason, ok := annos[f.Object][key]
			if !ok {
				continue
			}
			if strings.TrimSpace(reason) == "" {
				if !ck.o.Ignore[RuleAnnotationSyntax] {
					n := len(ck.findings)
					ck.add(byRef[f.Object], RuleAnnotationSyntax, []any{"metadata", "annotations", key}, "waiver %s has no reason: %s is not waived", key, r.ID)
					extra = append(extra, ck.findings[n])
					ck.findings = ck.findings[:n]
				}
				continue
			}
			f.Waived = reason
		}
	}
	ck.findings = append(ck.findings, extra...)
}
