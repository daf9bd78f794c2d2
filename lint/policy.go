package lint

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// PolicyOptions shape the admission policy.
type PolicyOptions struct {
	Target     Target
	HTTPSleeps map[string]time.Duration
	// Ignore are rule IDs left out of the policy.
	Ignore map[string]bool
	// Name of the policy and its binding.
	Name string
	// Actions are the binding's validationActions (Deny, Warn, Audit).
	Actions []admissionv1.ValidationAction
	// NamespaceSelector limits the binding to some namespaces; nil means
	// every namespace but kube-system.
	NamespaceSelector *metav1.LabelSelector
}

// DefaultPolicyName names the policy and its binding.
const DefaultPolicyName = "epwindow-termination"

// ParseActions reads --action: Deny, Warn or Audit, comma-separated (the
// API allows Warn or Deny with Audit, not Deny with Warn).
func ParseActions(s string) ([]admissionv1.ValidationAction, error) {
	var out []admissionv1.ValidationAction
	for _, p := range strings.Split(s, ",") {
		var a admissionv1.ValidationAction
		switch strings.ToLower(strings.TrimSpace(p)) {
		case "deny":
			a = admissionv1.Deny
		case "warn":
			a = admissionv1.Warn
		case "audit":
			a = admissionv1.Audit
		default:
			return nil, fmt.Errorf("--action %q: want Deny, Warn or Audit (comma-separated to combine, e.g. Warn,Audit)", p)
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	if slices.Contains(out, admissionv1.Deny) && slices.Contains(out, admissionv1.Warn) {
		return nil, fmt.Errorf("--action %q: Deny and Warn together are redundant and the API rejects them", s)
	}
	return out, nil
}

// cel builds the policy's expressions for one number.
type cel struct{ o PolicyOptions }

// annotation is the value of the annotation whose key the CEL expression
// key names: on the pod template, else on the object, else ” (lint merges
// them the same way).
func (cel) annotation(key string) string {
	return fmt.Sprintf("((%[1]s) in variables.templateAnnotations ? variables.templateAnnotations[%[1]s] : ((%[1]s) in variables.objectAnnotations ? variables.objectAnnotations[%[1]s] : ''))", key)
}

// waived is true when the object carries a waiver with a reason.
func (cel) waived(id string) string {
	return fmt.Sprintf("%s in variables.waived", strconv.Quote(id))
}

// waivedVar lists the rule IDs the object waives (by ID or name).
func (x cel) waivedVar() string {
	var pairs []string
	for _, r := range Rules {
		if r.Policy {
			pairs = append(pairs, fmt.Sprintf("[%q, %q]", r.ID, r.Name))
		}
	}
	return fmt.Sprintf("[%s].filter(p, p.exists(k, %s.trim() != '')).map(p, p[0])",
		strings.Join(pairs, ", "), x.annotation(strconv.Quote(WaiverPrefix)+" + k"))
}

// sleepNS is an exec command's sleep in nanoseconds, or -1, as lint's
// execSleep reads it: `sleep [--] ARGS`, or `SHELL [options] -c SCRIPT`
// whose script starts with that sleep.
func (x cel) sleepNS(cmd string) string {
	// The arguments of `sleep [--] ARGS`: argv[0] and -- never match
	// reSleepArg, so all the rest do when the count is right.
	args := fmt.Sprintf("%s.filter(w, w.matches(%s))", cmd, celString(reSleepArg))
	direct := fmt.Sprintf("%[1]s[0].matches(%[2]s) && size(%[3]s) > 0 && size(%[3]s) == size(%[1]s) - (size(%[1]s) > 1 && %[1]s[1] == '--' ? 2 : 1)",
		cmd, celString(reSleep), args)
	script := fmt.Sprintf("%s.find(%s).findAll(%s)", x.shellScript(cmd), celString(reSleepScript), celString(reSleepWord))
	return fmt.Sprintf("(size(%[1]s) == 0 ? -1 : (%[2]s ? %[3]s : %[4]s))",
		cmd, direct, x.sumSleep(args), x.sumSleep(script))
}

// sumSleep is the nanoseconds of sleep arguments (a list of strings), or
// -1 if one is not reSleepArg or they reach maxSleep: lint's sleepArgs.
// Each is the float64 product of the number and the unit, truncated, as
// in Go; && absorbs the errors of the branches it does not need.
func (cel) sumSleep(args string) string {
	ns := func(w string) string {
		return fmt.Sprintf("(double(%[1]s.find('^[0-9.]+')) * (%[1]s.endsWith('m') ? %[2]s : (%[1]s.endsWith('h') ? %[3]s : (%[1]s.endsWith('d') ? %[4]s : %[5]s))))",
			w, celDouble(sleepUnits['m']), celDouble(sleepUnits['h']), celDouble(sleepUnits['d']), celDouble(sleepUnits['s']))
	}
	return fmt.Sprintf("(size(%[1]s) > 0 && %[1]s.all(w, w.matches(%[2]s) && %[3]s < %[4]s) && %[1]s.map(w, double(int(%[3]s))).sum() < %[4]s ? %[1]s.map(w, int(%[3]s)).sum() : -1)",
		args, celString(reSleepArg), ns("w"), celDouble(maxSleep))
}

// celDouble writes f as a CEL double literal.
func celDouble(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// shellScript is the script of `SHELL [options] -c SCRIPT` in argv, or
// the empty string, with hasShellScript telling an empty script from
// none: lint's shellOperand, its words mapped to the same class letters.
func (x cel) shellScript(argv string) string {
	return fmt.Sprintf("(%[1]s ? %[2]s[size(%[3]s.find(%[4]s)) - 1] : '')",
		x.hasShellScript(argv), argv, x.shellClasses(argv), celString(reShellOperand))
}

func (x cel) hasShellScript(argv string) string {
	return fmt.Sprintf("(size(%[1]s) > 0 && %[1]s[0].matches(%[2]s) && %[3]s.matches(%[4]s))",
		argv, celString(reShell), x.shellClasses(argv), celString(reShellCommand))
}

// hasShellFile is true for `SHELL [options] FILE …`: an operand, no -c.
func (x cel) hasShellFile(argv string) string {
	classes := x.shellClasses(argv)
	return fmt.Sprintf("(size(%[1]s) > 0 && %[1]s[0].matches(%[2]s) && %[3]s.matches(%[4]s) && !%[3]s.matches(%[5]s))",
		argv, celString(reShell), classes, celString(reShellOperand), celString(reShellCommand))
}

// shellClasses is lint's shellClasses: one letter a word, joined. A
// letter string parsed by a regular expression instead of an index loop:
// CEL has no loop, and the two-variable comprehensions that give an index
// need Kubernetes 1.32 (k8s.io/apiserver/pkg/cel/environment/base.go);
// join (strings v2, 1.29), findAll (1.0) and sum (1.0) keep the policy
// running on 1.30.
func (cel) shellClasses(argv string) string {
	class := "'x'"
	for i := len(shellWordClasses) - 1; i >= 0; i-- {
		c := shellWordClasses[i]
		class = fmt.Sprintf("(w.matches(%s) ? '%s' : %s)", celString(c.re), c.class, class)
	}
	return fmt.Sprintf("%s.map(w, %s).join()", argv, class)
}

// celString quotes s as a CEL string literal (raw strings keep regular
// expressions readable).
func celString(s string) string {
	if !strings.Contains(s, "'") && !strings.Contains(s, "\n") {
		return "r'" + s + "'"
	}
	return strconv.Quote(s)
}

// hook is one serving container's preStop in nanoseconds, as lint reads
// it: ≥ 0 a known length (the sleep action's seconds saturate at
// math.MaxInt64 ns as in lint's preStopLength), -1 unknown, -2 none, -3 an
// exec sleep in a distroless image (it fails).
func (x cel) hook() string {
	cmd := "c.lifecycle.preStop.exec.command"
	distroless := fmt.Sprintf("(c.image.contains('distroless') || %[1]s == 'true' || %[1]s == '*' || %[1]s.split(',').exists(n, n.trim() == c.name))", "variables.distroless")
	paths := "{}"
	if len(x.o.HTTPSleeps) > 0 {
		var kv []string
		for _, p := range slices.Sorted(maps.Keys(x.o.HTTPSleeps)) {
			kv = append(kv, fmt.Sprintf("%s: %d", strconv.Quote(p), int64(x.o.HTTPSleeps[p])))
		}
		paths = "{" + strings.Join(kv, ", ") + "}"
	}
	return fmt.Sprintf(`(!has(c.lifecycle) || !has(c.lifecycle.preStop)) ? -2 : `+
		`has(c.lifecycle.preStop.sleep) ? (c.lifecycle.preStop.sleep.seconds > %[5]d ? %[6]d : c.lifecycle.preStop.sleep.seconds * 1000000000) : `+
		`has(c.lifecycle.preStop.exec) ? (!has(%[1]s) ? -1 : (%[2]s >= 0 && %[3]s ? -3 : %[2]s)) : `+
		`(has(c.lifecycle.preStop.httpGet) && has(c.lifecycle.preStop.httpGet.path) && c.lifecycle.preStop.httpGet.path in %[4]s) ? %[4]s[c.lifecycle.preStop.httpGet.path] : -1`,
		cmd, x.sleepNS(cmd), distroless, paths, int64(math.MaxInt64/time.Second), int64(math.MaxInt64))
}

// shellPID1 is true for a container whose PID 1 is a shell that will not
// forward SIGTERM: lint's shellPID1.
func (x cel) shellPID1() string {
	argv := "(c.command + (has(c.args) ? c.args : []))"
	return fmt.Sprintf(`has(c.command) && size(c.command) > 0 && (%[1]s[0].endsWith('.sh') || %[2]s || (%[3]s && !%[4]s.matches(%[5]s)))`,
		argv, x.hasShellFile(argv), x.hasShellScript(argv), x.shellScript(argv), celString(reExec))
}

func (x cel) variables() []admissionv1.Variable {
	t := x.o.Target
	durRE := celString(reDuration)
	delay := "variables.delay"
	return []admissionv1.Variable{
		// dyn(): each branch is a field of one kind only; the API server's
		// type checker (status.typeChecking) would flag it for the others.
		{Name: "template", Expression: "object.kind == 'Pod' ? dyn(object) : (object.kind == 'CronJob' ? dyn(object).spec.jobTemplate.spec.template : dyn(object).spec.template)"},
		{Name: "spec", Expression: "variables.template.spec"},
		{Name: "templateAnnotations", Expression: "has(variables.template.metadata) && has(variables.template.metadata.annotations) ? variables.template.metadata.annotations : {}"},
		{Name: "objectAnnotations", Expression: "has(object.metadata.annotations) ? object.metadata.annotations : {}"},
		{Name: "waived", Expression: x.waivedVar()},
		{Name: "delay", Expression: x.annotation(strconv.Quote(AnnotationShutdownDelay))},
		{Name: "distroless", Expression: x.annotation(strconv.Quote(AnnotationDistroless))},
		// The in-app delay (epwindow.io/shutdown-delay) in nanoseconds:
		// int() of a duration is its nanoseconds.
		{Name: "delayNS", Expression: fmt.Sprintf("%[1]s.matches(%[2]s) ? int(duration(%[1]s)) : 0", delay, durRE)},
		{Name: "serving", Expression: "variables.spec.containers.filter(c, has(c.ports) && size(c.ports) > 0)"},
		{Name: "hooks", Expression: "variables.serving.map(c, " + x.hook() + ")"},
		{Name: "grace", Expression: fmt.Sprintf("has(variables.spec.terminationGracePeriodSeconds) ? variables.spec.terminationGracePeriodSeconds : %d", defaultGraceSeconds)},
		// epwindow.io/stream-drain replaces --drain when longer, as lint
		// does: whole seconds, rounded up.
		{Name: "streamDrain", Expression: x.annotation(strconv.Quote(AnnotationStreamDrain))},
		{Name: "tail", Expression: fmt.Sprintf("variables.streamDrain.matches(%[1]s) && duration(variables.streamDrain) > duration('%[2]dns') ? (duration(variables.streamDrain) + duration('%[3]dns') + duration('999999999ns')).getSeconds() : %[4]d",
			durRE, int64(t.Drain), int64(t.Headroom), t.TailSeconds())},
		// lint's GraceSeconds of each container's cover (its hook, if
		// known, + the in-app delay, saturating as satAdd), in whole
		// seconds rounded up.
		{Name: "cover", Expression: fmt.Sprintf("variables.hooks.map(h, %s)", celSatAdd("(h > 0 ? h : 0)", "variables.delayNS"))},
		{Name: "needGrace", Expression: fmt.Sprintf("(variables.cover.map(n, n / 1000000000 + (n %% 1000000000 > 0 ? 1 : 0)) + [%d]).max() + variables.tail", t.PreStopSeconds())},
	}
}

// celSatAdd is lint's satAdd in CEL, for a, b ≥ 0: CEL fails on overflow
// where Go wraps.
func celSatAdd(a, b string) string {
	return fmt.Sprintf("(%[1]s > %[3]d - %[2]s ? %[3]d : %[1]s + %[2]s)", a, b, int64(math.MaxInt64))
}

// validation is one rule's CEL: pass, and the message when it fails.
func (x cel) validation(id, pass, what string) admissionv1.Validation {
	r := mustRule(id)
	return admissionv1.Validation{
		Expression:        fmt.Sprintf("(%s) || (%s)", x.waived(id), pass),
		MessageExpression: fmt.Sprintf("%s + ': ' + %s + '. Fix: ' + %s", strconv.Quote(r.ID+" "+r.Name), what, strconv.Quote(r.Fix)),
		Reason:            ptr.To(metav1.StatusReasonInvalid),
	}
}

func (x cel) validations() []admissionv1.Validation {
	n := x.o.Target.PreStopSeconds()
	need := n * int64(time.Second)
	failAfter := func(p string) string {
		return fmt.Sprintf("(has(%[1]s.failureThreshold) ? %[1]s.failureThreshold : 3) * (has(%[1]s.periodSeconds) ? %[1]s.periodSeconds : 10)", p)
	}
	var same []string
	for _, h := range []string{"httpGet", "tcpSocket", "grpc", "exec"} {
		same = append(same, fmt.Sprintf("has(c.livenessProbe.%[1]s) == has(c.readinessProbe.%[1]s) && (!has(c.livenessProbe.%[1]s) || c.livenessProbe.%[1]s == c.readinessProbe.%[1]s)", h))
	}
	shared := fmt.Sprintf("has(c.livenessProbe) && has(c.readinessProbe) && %s && %s <= %s",
		strings.Join(same, " && "), failAfter("c.livenessProbe"), failAfter("c.readinessProbe"))
	all := []struct{ id, pass, what string }{
		{RuleReadinessProbe, "variables.serving.all(c, has(c.readinessProbe))",
			"'container ' + variables.serving.filter(c, !has(c.readinessProbe))[0].name + ' declares a port but has no readinessProbe'"},
		{RulePreStopMissing, "variables.delayNS > 0 || variables.hooks.all(h, h != -2)",
			fmt.Sprintf("'a serving container has no preStop hook and the pod no %s annotation'", AnnotationShutdownDelay)},
		// lint: have = hook + delay < need, written so nothing overflows.
		{RulePreStopShort, fmt.Sprintf("variables.hooks.all(h, h == -1 || h == -3 || (h == -2 ? (variables.delayNS == 0 || variables.delayNS >= %[1]d) : h >= %[1]d - variables.delayNS))", need),
			fmt.Sprintf("'preStop (+ in-app delay) ' + string(double((variables.hooks.filter(h, h >= 0).map(h, %s) + (variables.hooks.exists(h, h == -2) && variables.delayNS > 0 ? [variables.delayNS] : [])).min()) / 1e9) + 's < %ds'", celSatAdd("h", "variables.delayNS"), n)},
		{RulePreStopUnknown, "variables.hooks.all(h, h != -1)",
			"'a preStop hook whose length the policy cannot read (httpGet to an unlisted path, or a command that is not a sleep)'"},
		{RuleGraceShort, "size(variables.serving) == 0 || variables.grace >= variables.needGrace",
			fmt.Sprintf("'terminationGracePeriodSeconds ' + string(variables.grace) + ' < preStop + drain %s + headroom %s = ' + string(variables.needGrace) + 's; set terminationGracePeriodSeconds: ' + string(variables.needGrace)",
				x.o.Target.Drain, x.o.Target.Headroom)},
		{RuleProbesShared, "!variables.spec.containers.exists(c, " + shared + ")",
			"'container ' + variables.spec.containers.filter(c, " + shared + ")[0].name + ': liveness probes the readiness endpoint and gives up no later'"},
		{RuleShellPID1, "!variables.spec.containers.exists(c, " + x.shellPID1() + ")",
			"'container ' + variables.spec.containers.filter(c, " + x.shellPID1() + ")[0].name + ': PID 1 is a shell without exec'"},
		{RuleDistrolessExec, "variables.hooks.all(h, h != -3)",
			"'a preStop exec sleep in a distroless image'"},
	}
	var out []admissionv1.Validation
	for _, v := range all {
		if !x.o.Ignore[v.id] {
			out = append(out, x.validation(v.id, v.pass, v.what))
		}
	}
	return out
}

// Policy builds the ValidatingAdmissionPolicy that enforces the rules CEL
// can check on one object (Rule.Policy) for o.Target, and its binding.
//
// It matches the workload kinds on CREATE, and on UPDATE when the spec
// changes (a controller's metadata update of an old object is never
// refused), and skips objects a controller owns (a Deployment's ReplicaSets
// and pods, a CronJob's Jobs): the owner was checked.
func Policy(o PolicyOptions) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding, error) {
	if err := o.Target.Validate(); err != nil {
		return nil, nil, err
	}
	if o.Name == "" {
		o.Name = DefaultPolicyName
	}
	if len(o.Actions) == 0 {
		o.Actions = []admissionv1.ValidationAction{admissionv1.Deny}
	}
	sel := o.NamespaceSelector
	if sel == nil {
		sel = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"}}}}
	}
	x := cel{o}
	ops := []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}
	rule := func(group string, resources ...string) admissionv1.NamedRuleWithOperations {
		return admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{
			Operations: ops,
			Rule:       admissionv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: resources},
		}}
	}
	meta := metav1.ObjectMeta{
		Name:        o.Name,
		Labels:      map[string]string{"app.kubernetes.io/managed-by": "epwindow"},
		Annotations: map[string]string{"epwindow.io/target": fmt.Sprintf("%s (%s)", o.Target, o.Target.From)},
	}
	policy := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: meta,
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{
				rule("apps", "deployments", "statefulsets", "daemonsets", "replicasets"),
				rule("batch", "jobs", "cronjobs"),
				rule("", "pods"),
			}},
			MatchConditions: []admissionv1.MatchCondition{
				{Name: "not-controlled", Expression: "!has(object.metadata.ownerReferences) || !object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller)"},
				{Name: "spec-changed", Expression: "request.operation != 'UPDATE' || object.spec != oldObject.spec"},
			},
			Variables:   x.variables(),
			Validations: x.validations(),
		},
	}
	if len(policy.Spec.Validations) == 0 {
		return nil, nil, fmt.Errorf("--ignore leaves no rule for the policy to enforce")
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: *meta.DeepCopy(),
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        o.Name,
			ValidationActions: o.Actions,
			MatchResources:    &admissionv1.MatchResources{NamespaceSelector: sel},
		},
	}
	return policy, binding, nil
}

// WritePolicy writes the policy and its binding as a YAML stream for
// kubectl apply -f -.
func WritePolicy(w io.Writer, o PolicyOptions) error {
	policy, binding, err := Policy(o)
	if err != nil {
		return err
	}
	for i, obj := range []any{policy, binding} {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		data = []byte(strings.Replace(string(data), "  creationTimestamp: null\n", "", 1))
		data = []byte(strings.Replace(string(data), "status: {}\n", "", 1))
		sep := ""
		if i > 0 {
			sep = "---\n"
		}
		if _, err := io.WriteString(w, sep+string(data)); err != nil {
			return err
		}
	}
	return nil
}
