package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epwindow/epwindow/lint"
)

// Flags of policy.
const (
	flagAction            = "action"
	flagNamespaceSelector = "namespace-selector"
	flagPolicyName        = "name"
)

func policyCommand() *cli.Command {
	return &cli.Command{
		Name:  "policy",
		Usage: "print a ValidatingAdmissionPolicy and its binding that enforce the lint rules CEL can check",
		UsageText: `epwindow policy --from run.jsonl | kubectl apply -f -
   epwindow policy --prestop 8s --drain 30s --action Warn --namespace-selector team=shop`,
		Description: `Prints an admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding
(CEL, Kubernetes 1.30+) holding every Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob and
bare Pod to the same number as lint (--from or --prestop/--drain/--headroom). Each refusal names the
rule and the fix. --action Deny refuses, Warn admits with a warning, Audit records in the audit log
(Warn,Audit combines). The binding applies to namespaces matching --namespace-selector (default:
every namespace but kube-system). Rules that need several objects (EPW009, EPW010, EPW012) and annotation
syntax (EPW011) are lint-only.`,
		Flags: append(numberFlags(),
			&cli.StringFlag{Name: flagAction, Value: "Deny", Usage: "Deny, Warn or Audit (the binding's validationActions; Warn,Audit to combine)"},
			&cli.StringFlag{Name: flagNamespaceSelector, Usage: "label selector of the namespaces to enforce in, e.g. team=shop or 'env in (prod)' (default: all but kube-system)"},
			&cli.StringFlag{Name: flagPolicyName, Value: lint.DefaultPolicyName, Usage: "name of the policy and its binding"},
		),
		OnUsageError: usageError("policy"),
		Action:       runPolicy,
	}
}

func runPolicy(c *cli.Context) error {
	fail := func(code int, format string, a ...any) error {
		return cli.Exit("epwindow policy: "+fmt.Sprintf(format, a...), code)
	}
	if c.NArg() > 0 {
		return fail(exitUsage, "takes no arguments (got %q): give the number with --%s or --%s", c.Args().Slice(), flagFrom, flagPreStop)
	}
	target, err := lintTarget(c)
	if err != nil {
		return fail(targetExit(err), "%v", err)
	}
	o := lint.PolicyOptions{Target: target, Name: c.String(flagPolicyName)}
	if o.HTTPSleeps, err = httpSleeps(c); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if o.Ignore, err = lint.ParseIgnore(c.StringSlice(flagIgnore)); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if o.Actions, err = lint.ParseActions(c.String(flagAction)); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if s := c.String(flagNamespaceSelector); s != "" {
		if o.NamespaceSelector, err = metav1.ParseToLabelSelector(s); err != nil {
			return fail(exitUsage, "--%s %q: %v", flagNamespaceSelector, s, err)
		}
	}
	if err := lint.WritePolicy(c.App.Writer, o); err != nil {
		return fail(exitUsage, "%v", err)
	}
	return nil
}
