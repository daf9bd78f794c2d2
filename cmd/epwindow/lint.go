package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"

	"github.com/epwindow/epwindow/lint"
	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/results"
)

// Flags of lint and policy.
const (
	flagFrom        = "from"
	flagPreStop     = "prestop"
	flagHTTPPreStop = "http-prestop"
	flagIgnore      = "ignore"
	flagCluster     = "cluster"
	flagAllNS       = "all-namespaces"
	// flagAcceptLowerBound takes a recommendation that is only a floor.
	flagAcceptLowerBound = "accept-lower-bound"
)

// numberFlags give the number lint and policy hold workloads to.
func numberFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: flagFrom, Usage: "a measure results file: hold workloads to its recommended preStop and grace period", Category: "Number"},
		&cli.BoolFlag{Name: flagAcceptLowerBound, Usage: "take --from's recommendation even when it is only a lower bound (trials cut at the hold): workloads are held to at least that", Category: "Number"},
		&cli.DurationFlag{Name: flagPreStop, Usage: "the preStop the propagation window needs (instead of --from)", Category: "Number"},
		&cli.DurationFlag{Name: measure.FlagDrain, Usage: "longest request the app finishes after SIGTERM (default: the results file's, else 0)", Category: "Number"},
		&cli.DurationFlag{Name: flagHeadroom, Usage: fmt.Sprintf("added to preStop + drain for the grace period (default %s)", results.DefaultHeadroom), Category: "Number"},
		&cli.StringSliceFlag{Name: flagHTTPPreStop, Usage: "a preStop httpGet path and how long it takes to answer, e.g. /prestop=10s (repeatable)", Category: "Number"},
		&cli.StringSliceFlag{Name: flagIgnore, Usage: "a rule not to check, by ID or name, e.g. EPW006 (repeatable)"},
	}
}

// lintTarget turns the number flags into a lint.Target: the results file's
// recommendation (computed by the results package, as report prints it,
// with --drain/--headroom overriding the run's), or the flags by hand.
func lintTarget(c *cli.Context) (lint.Target, error) {
	from := c.String(flagFrom)
	if from == "" {
		if !c.IsSet(flagPreStop) {
			return lint.Target{}, fmt.Errorf("give the number: --%s run.jsonl (a measure results file), or --%s DUR [--%s DUR --%s DUR]", flagFrom, flagPreStop, measure.FlagDrain, flagHeadroom)
		}
		t := lint.Target{PreStop: c.Duration(flagPreStop), Drain: c.Duration(measure.FlagDrain), Headroom: results.DefaultHeadroom, From: "--prestop"}
		if c.IsSet(flagHeadroom) {
			t.Headroom = c.Duration(flagHeadroom)
		}
		return t, t.Validate()
	}
	if c.IsSet(flagPreStop) {
		return lint.Target{}, fmt.Errorf("--%s and --%s both give the preStop: use one", flagFrom, flagPreStop)
	}
	opts := results.Options{Drain: c.Duration(measure.FlagDrain), Headroom: c.Duration(flagHeadroom)}
	if opts.Drain < 0 || opts.Headroom < 0 {
		return lint.Target{}, fmt.Errorf("--%s and --%s must not be negative", measure.FlagDrain, flagHeadroom)
	}
	file, err := readResults(from, os.Stdin)
	if err != nil {
		return lint.Target{}, fmt.Errorf("--%s: %w", flagFrom, err)
	}
	rec := results.Summarize(file, opts).Doc().Recommendation
	if rec == nil {
		return lint.Target{}, fmt.Errorf("--%s %s: no recommendation (no valid trial recorded the traffic end and a termination signal); see epwindow report %s", flagFrom, from, from)
	}
	if rec.LowerBound() && !c.Bool(flagAcceptLowerBound) {
		return lint.Target{}, &lowerBoundError{fmt.Sprintf("--%s %s: the recommendation is only a lower bound (preStop ≥ %ds: %d of %d trials ran into the hold, and its bound fell on one): rerun epwindow measure with --%s %s, or pass --%s to hold workloads to at least that",
			flagFrom, from, rec.PreStopSeconds, rec.Censored, rec.N, measure.FlagHold, longerHold(holdOf(file.Header)), flagAcceptLowerBound)}
	}
	t := lint.FromRecommendation(rec, from)
	return t, t.Validate()
}

// lowerBoundError is lintTarget's refusal of a recommendation that is only
// a floor: the commands exit exitLowerBound on it, as measure does.
type lowerBoundError struct{ msg string }

func (e *lowerBoundError) Error() string { return e.msg }

// targetExit is the exit code of a lintTarget error.
func targetExit(err error) int {
	var lb *lowerBoundError
	if errors.As(err, &lb) {
		return exitLowerBound
	}
	return exitUsage
}

// httpSleeps reads --http-prestop PATH=DUR.
func httpSleeps(c *cli.Context) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, v := range c.StringSlice(flagHTTPPreStop) {
		p, d, ok := strings.Cut(v, "=")
		dur, err := time.ParseDuration(d)
		if !ok || !strings.HasPrefix(p, "/") || err != nil || dur < 0 {
			return nil, fmt.Errorf("--%s %q: want PATH=DURATION, e.g. /prestop=10s", flagHTTPPreStop, v)
		}
		out[p] = dur
	}
	return out, nil
}

func lintCommand() *cli.Command {
	return &cli.Command{
		Name:      "lint",
		Usage:     "check workload manifests (files, kustomize directories, or the cluster's live objects) against the measured number",
		ArgsUsage: "[FILE|DIR|-]...",
		UsageText: `epwindow lint --from run.jsonl deploy/                       # YAML files, or a kustomize directory
   epwindow lint --prestop 8s --drain 30s --headroom 5s app.yaml
   helm template my-app ./chart | epwindow lint --from run.jsonl -
   epwindow lint --from run.jsonl --format sarif k8s/ > lint.sarif   # for code scanning
   epwindow lint --from run.jsonl --cluster -n shop                  # live objects (-A: all namespaces)`,
		Description: `Checks Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs and bare Pods against the
number: --from a measure results file (its recommended preStop; its drain and headroom unless
--drain/--headroom say otherwise), or --prestop/--drain/--headroom by hand. A directory with a
kustomization is built in memory; any other directory is read for *.yaml, *.yml and *.json files.
Findings name file:line:column (live objects: namespace/name), the rule, why it matters and the fix.
Waive a rule for one object with the annotation lint.epwindow.io/RULE: "reason" (on the object or its
pod template); --ignore RULE drops it everywhere. Exit codes: 0 clean, 2 bad input, 3 findings.`,
		Flags: append(append(numberFlags(),
			&cli.StringFlag{Name: flagFormat, Value: "text", Usage: "text, json or sarif (SARIF 2.1.0)"},
			&cli.BoolFlag{Name: flagCluster, Usage: "check the live objects of the cluster (-n NS, else the context's namespace; -A all)", Category: "Cluster"},
			&cli.BoolFlag{Name: flagAllNS, Aliases: []string{"A"}, Usage: "with --cluster: every namespace (overrides -n, as in kubectl)", Category: "Cluster"},
		), lintKubeFlags()...),
		OnUsageError: usageError("lint"),
		Action:       runLint,
	}
}

// lintKubeFlags are kubectl's client flags but --cluster: lint's --cluster
// (check live objects) came first, and scripts use it. The kubeconfig's
// cluster is picked through --context or --server instead.
func lintKubeFlags() []cli.Flag {
	return slices.DeleteFunc(kubeFlags("with --cluster: the namespace (default: the kubeconfig context's)"), func(f cli.Flag) bool {
		return slices.Contains(f.Names(), flagKubeCluster)
	})
}

func runLint(c *cli.Context) error {
	fail := func(code int, format string, a ...any) error {
		return cli.Exit("epwindow lint: "+fmt.Sprintf(format, a...), code)
	}
	write, ok := lint.Writers[c.String(flagFormat)]
	if !ok {
		return fail(exitUsage, "--%s %q: want text, json or sarif", flagFormat, c.String(flagFormat))
	}
	if c.Bool(flagCluster) == (c.NArg() > 0) {
		return fail(exitUsage, "give files, directories or - for standard input, or --%s for live objects (not both)", flagCluster)
	}
	for _, f := range []string{flagNamespace, flagAllNS} {
		if c.IsSet(f) && !c.Bool(flagCluster) {
			return fail(exitUsage, "--%s needs --%s", f, flagCluster)
		}
	}
	target, err := lintTarget(c)
	if err != nil {
		return fail(targetExit(err), "%v", err)
	}
	opts := lint.Options{Target: target}
	if opts.HTTPSleeps, err = httpSleeps(c); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if opts.Ignore, err = lint.ParseIgnore(c.StringSlice(flagIgnore)); err != nil {
		return fail(exitUsage, "%v", err)
	}
	var objs []*lint.Object
	if c.Bool(flagCluster) {
		kc, err := kube(c)
		if err != nil {
			return fail(kubeExitCode(err), "%v", err)
		}
		dyn, err := dynamic.NewForConfig(kc.config)
		if err != nil {
			return fail(exitCluster, "%v", err)
		}
		ns := kc.namespace
		if c.Bool(flagAllNS) {
			ns = ""
		}
		var notes []string
		objs, notes, err = lint.ListLive(c.Context, kc.client, dyn, ns)
		switch {
		case apierrors.IsForbidden(err):
			return fail(exitForbidden, "%v", err)
		case err != nil:
			return fail(exitCluster, "%v", err)
		}
		for _, n := range notes {
			fmt.Fprintln(c.App.ErrWriter, "epwindow lint:", n)
		}
	} else {
		for _, arg := range c.Args().Slice() {
			more, err := readInput(arg)
			if err != nil {
				return fail(exitUsage, "%v", err)
			}
			objs = append(objs, more...)
		}
	}
	findings, err := lint.Check(objs, opts)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	checked := 0
	for _, o := range objs {
		for _, k := range lint.WorkloadKinds() {
			if o.Kind == k {
				checked++
			}
		}
	}
	rep := &lint.Report{Target: target, Findings: findings, Checked: checked, ToolVersion: version}
	if err := write(c.App.Writer, rep); err != nil {
		return fail(exitFailure, "%v", err)
	}
	if n := rep.Failing(); n > 0 {
		return cli.Exit("", exitThreshold)
	}
	return nil
}

// readInput reads one argument: - (standard input), a kustomize
// directory, a directory of manifests, or a file.
func readInput(arg string) ([]*lint.Object, error) {
	if arg == "-" {
		return lint.ParseYAML("-", os.Stdin)
	}
	st, err := os.Stat(arg)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return readFile(arg)
	}
	if lint.IsKustomization(arg) {
		return lint.Kustomize(arg)
	}
	var out []*lint.Object
	err = filepath.WalkDir(arg, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch ext := filepath.Ext(p); {
		case d.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json"):
			return nil
		}
		objs, err := readFile(p)
		out = append(out, objs...)
		return err
	})
	return out, err
}

func readFile(path string) ([]*lint.Object, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	objs, err := lint.ParseYAML(path, f)
	var ie *lint.InputError
	if err != nil && !errors.As(err, &ie) {
		err = fmt.Errorf("%s: %w", path, err)
	}
	return objs, err
}
