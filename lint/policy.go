package lint

import (
	"fmt"
	"io"
	"maps"
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

// sleepSeconds is an exec command's sleep in whole seconds, or -1: `sleep
// N[smhd]` or `SHELL [-opts] -c 'sleep N[smhd]; …'` (integers only; lint
// itself reads fractions and several arguments too, so the policy calls
// those unknown, EPW004).
func (x cel) sleepSeconds(cmd string) string {
	secs := func(s string) string {
		return fmt.Sprintf(`(int(%[1]s.find('[0-9]+')) * (%[1]s.endsWith('m') ? 60 : (%[1]s.endsWith('h') ? 3600 : (%[1]s.endsWith('d') ? 86400 : 1))))`, s)
	}
	script := x.shellScript(cmd)
	return fmt.Sprintf(`(size(%[1]s) == 2 && %[1]s[0].matches('^(.*/)?sleep$') && %[1]s[1].matches('^[0-9]+[smhd]?$') ? %[2]s : `+
		`(size(%[1]s) > 2 && %[1]s[0].matches(%[3]s) && %[4]s.matches(%[5]s) ? %[6]s : -1))`,
		cmd, secs(cmd+"[1]"), celString(reShell), script, celString(reSleepScriptInt), secs(script+".find("+celString(reSleepWord)+")"))
}

// maxShellOpts is how many option words before a shell's script the policy
// reads (sh -e -u -x -c SCRIPT has 3, -c included); lint reads any number.
// Unrolled rather than a two-variable comprehension, which needs
// Kubernetes 1.32, so that the policy still runs on 1.30.
const maxShellOpts = 4

// shellScript is the script of `SHELL [-opts] -c SCRIPT` in argv, or ”, as
// lint's shellScript finds it: the first word after argv[0] that is not an
// option, when an option before it holds c.
func (cel) shellScript(argv string) string {
	isOpt := func(i int) string {
		return fmt.Sprintf("(%[1]s[%[2]d].startsWith('-') && !%[1]s[%[2]d].startsWith('--'))", argv, i)
	}
	out := "''"
	for k := maxShellOpts + 1; k >= 2; k-- {
		var opts, hasC []string
		for i := 1; i < k; i++ {
			opts = append(opts, isOpt(i))
			hasC = append(hasC, fmt.Sprintf("%s[%d].matches(%s)", argv, i, celString(reShellOpts)))
		}
		out = fmt.Sprintf("(size(%[1]s) > %[2]d && %[3]s && !%[4]s && (%[5]s) ? %[1]s[%[2]d] : %[6]s)",
			argv, k, strings.Join(opts, " && "), isOpt(k), strings.Join(hasC, " || "), out)
	}
	return out
}

// celString quotes s as a CEL string literal (raw strings keep regular
// expressions readable).
func celString(s string) string {
	if !strings.Contains(s, "'") && !strings.Contains(s, "\n") {
		return "r'" + s + "'"
	}
	return strconv.Quote(s)
}

// hook is one serving container's preStop in seconds: ≥ 0 a known length,
// -1 unknown, -2 none, -3 an exec sleep in a distroless image (it fails).
func (x cel) hook() string {
	cmd := "c.lifecycle.preStop.exec.command"
	distroless := fmt.Sprintf("(c.image.contains('distroless') || %[1]s == 'true' || %[1]s == '*' || %[1]s.split(',').exists(n, n.trim() == c.name))", "variables.distroless")
	paths := "{}"
	if len(x.o.HTTPSleeps) > 0 {
		var kv []string
		for _, p := range slices.Sorted(maps.Keys(x.o.HTTPSleeps)) {
			// Floor: the policy then never credits more than the path takes.
			kv = append(kv, fmt.Sprintf("%s: %d", strconv.Quote(p), int64(x.o.HTTPSleeps[p]/time.Second)))
		}
		paths = "{" + strings.Join(kv, ", ") + "}"
	}
	return fmt.Sprintf(`(!has(c.lifecycle) || !has(c.lifecycle.preStop)) ? -2 : `+
		`has(c.lifecycle.preStop.sleep) ? c.lifecycle.preStop.sleep.seconds : `+
		`has(c.lifecycle.preStop.exec) ? (!has(%[1]s) ? -1 : (%[2]s >= 0 && %[3]s ? -3 : %[2]s)) : `+
		`(has(c.lifecycle.preStop.httpGet) && has(c.lifecycle.preStop.httpGet.path) && c.lifecycle.preStop.httpGet.path in %[4]s) ? %[4]s[c.lifecycle.preStop.httpGet.path] : -1`,
		cmd, x.sleepSeconds(cmd), distroless, paths)
}

// shellPID1 is true for a container whose PID 1 is a shell that will not
// forward SIGTERM (the common forms of lint's shellPID1).
func (x cel) shellPID1() string {
	argv := "(c.command + (has(c.args) ? c.args : []))"
	script := x.shellScript(argv)
	return fmt.Sprintf(`has(c.command) && size(c.command) > 0 && (%[1]s[0].endsWith('.sh') || (%[1]s[0].matches(%[2]s) && size(%[1]s) > 1 && `+
		`(%[3]s != '' ? !%[3]s.matches(%[4]s) : !%[1]s[1].startsWith('-'))))`,
		argv, celString(reShell), script, celString(reExec))
}

func (x cel) variables() []admissionv1.Variable {
	t := x.o.Target
	durRE := celString(`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`)
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
		// The in-app delay (epwindow.io/shutdown-delay), rounded down for
		// the preStop comparison and up for the grace period, as lint
		// compares the exact duration.
		{Name: "delayFloor", Expression: fmt.Sprintf("%[1]s.matches(%[2]s) ? duration(%[1]s).getSeconds() : 0", delay, durRE)},
		{Name: "delayCeil", Expression: fmt.Sprintf("%[1]s.matches(%[2]s) ? (duration(%[1]s) + duration('999999999ns')).getSeconds() : 0", delay, durRE)},
		{Name: "serving", Expression: "variables.spec.containers.filter(c, has(c.ports) && size(c.ports) > 0)"},
		{Name: "hooks", Expression: "variables.serving.map(c, " + x.hook() + ")"},
		{Name: "grace", Expression: fmt.Sprintf("has(variables.spec.terminationGracePeriodSeconds) ? variables.spec.terminationGracePeriodSeconds : %d", defaultGraceSeconds)},
		// epwindow.io/stream-drain replaces --drain when longer, as lint
		// does: whole seconds, rounded up.
		{Name: "streamDrain", Expression: x.annotation(strconv.Quote(AnnotationStreamDrain))},
		{Name: "tail", Expression: fmt.Sprintf("variables.streamDrain.matches(%[1]s) && duration(variables.streamDrain) > duration('%[2]dns') ? (duration(variables.streamDrain) + duration('%[3]dns') + duration('999999999ns')).getSeconds() : %[4]d",
			durRE, int64(t.Drain), int64(t.Headroom), t.TailSeconds())},
		{Name: "needGrace", Expression: fmt.Sprintf("(variables.hooks.map(h, (h > 0 ? h : 0) + variables.delayCeil) + [%d]).max() + variables.tail", t.PreStopSeconds())},
	}
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
		{RulePreStopMissing, "variables.delayCeil > 0 || variables.hooks.all(h, h != -2)",
			fmt.Sprintf("'a serving container has no preStop hook and the pod no %s annotation'", AnnotationShutdownDelay)},
		{RulePreStopShort, fmt.Sprintf("variables.hooks.all(h, h == -1 || h == -3 || (h == -2 ? (variables.delayCeil == 0 || variables.delayFloor >= %[1]d) : h + variables.delayFloor >= %[1]d))", n),
			fmt.Sprintf("'preStop (+ in-app delay) ' + string((variables.hooks.filter(h, h >= 0).map(h, h + variables.delayFloor) + (variables.hooks.exists(h, h == -2) && variables.delayCeil > 0 ? [variables.delayFloor] : [])).min()) + 's < %ds'", n)},
		{RulePreStopUnknown, "variables.hooks.all(h, h != -1)",
			"'a preStop hook whose length the policy cannot read (httpGet to an unlisted path, or a command that is not sleep N)'"},
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
