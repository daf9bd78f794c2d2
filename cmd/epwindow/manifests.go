package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure"
	"github.com/epwindow/epwindow/measure/upstream"
	"github.com/epwindow/epwindow/results"
)

// Flags of `epwindow manifests` beyond the workload flags it shares with
// measure.
const (
	flagNamespace = "namespace"
	flagName      = "name"
	flagOverlay   = "overlay"
	flagLabel     = "label"
	flagRBAC      = "rbac"

	// The in-cluster schedule's; --trials is measure's, and --keep-runs
	// and --keep-for are passed on to measure under their own names.
	flagSchedule       = "schedule"
	flagHistorySize    = "history-size"
	flagStorageClass   = "storage-class"
	flagMetricsRefresh = "metrics-refresh"
)

// Defaults of the schedule's run: 10 trials 4 times a day fill the
// 120-trial baseline `epwindow history` judges against in 3 days, and 500
// runs or 90 days keep several baselines.
const (
	defaultScheduleTrials = 10
	defaultKeepRuns       = 500
	defaultKeepFor        = 90 * 24 * time.Hour
)

// Defaults of the workload flags: measure's (a test holds them equal).
const (
	defaultReplicas    = 3
	defaultHold        = 60 * time.Second
	defaultGraceMargin = deploy.DefaultGraceMargin
	defaultHost        = "epwindow.local"
	defaultNamespace   = "epwindow"
	// defaultName is the name measure gives the Deployment, Service and
	// Ingress.
	defaultName = "probe"
)

// rbacVariants are the directories under deploy/rbac/ that --rbac prints.
var rbacVariants = []string{"cluster", "namespaced", "observer", "target"}

// workloadFlags are the flags that shape the probe workload. measure and
// manifests both take them, so that manifests prints what measure applies.
func workloadFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: measure.FlagReplicas, Value: defaultReplicas, Usage: "probe pods behind the Service", Category: "Workload"},
		&cli.StringFlag{Name: measure.FlagRoute, Value: measure.RouteIngress, Usage: "what routes the load to the probe Service: ingress (an Ingress of --ingress-class) or httproute (a Gateway API HTTPRoute on --gateway)", Category: "Workload"},
		&cli.StringFlag{Name: measure.FlagIngressClass, Usage: "the Ingress's class; also picks the overlay of that name (default: the cluster's default class); --route ingress only", Category: "Workload"},
		&cli.StringFlag{Name: measure.FlagGateway, Usage: "NAMESPACE/NAME of the Gateway the HTTPRoute attaches to (required with --route httproute); its listener must admit routes from the run's namespace", Category: "Workload"},
		&cli.StringFlag{Name: measure.FlagGatewaySection, Usage: "the HTTPRoute's parentRef sectionName: one listener of --gateway (default: every listener that admits it)", Category: "Workload"},
		&cli.StringFlag{Name: measure.FlagHost, Value: defaultHost, Usage: "the Ingress rule's host, or the HTTPRoute's hostname (\"\": any host)", Category: "Workload"},
		&cli.StringFlag{Name: measure.FlagImage, Value: deploy.DefaultImage, Usage: "probe image, with epwindow on PATH (make image builds one)", Category: "Workload"},
		&cli.DurationFlag{Name: measure.FlagHold, Value: defaultHold, Usage: "how long a deleted probe keeps serving unless released", Category: "Workload"},
		&cli.DurationFlag{Name: measure.FlagGraceMargin, Value: defaultGraceMargin, Usage: "terminationGracePeriodSeconds = preStop sleep + hold + this", Category: "Workload"},
		&cli.BoolFlag{Name: measure.FlagPreStop, Value: true, Usage: "give the probe pods the preStop httpGet /prestop hook (--prestop=false: none)", Category: "Workload"},
		&cli.DurationFlag{Name: measure.FlagPreStopSleep, Usage: "make the preStop hook wait this long before SIGTERM (apply a recommendation)", Category: "Workload"},
		&cli.BoolFlag{Name: measure.FlagExitOnTerm, Usage: "probes exit at once on SIGTERM: the fast-exiting app", Category: "Workload"},
		&cli.BoolFlag{Name: measure.FlagReadiness, Value: true, Usage: "give the probe pods a readiness probe (--readiness=false: none, so a pod is Ready as soon as it starts)", Category: "Workload"},
		&cli.DurationFlag{Name: measure.FlagListenDelay, Usage: "probes open their listener only this long after starting (an app loading its configuration)", Category: "Workload"},
		&cli.DurationFlag{Name: measure.FlagClockOffset, Usage: "fault injection: shift every probe's clock by this much", Category: "Workload"},
		&cli.StringFlag{Name: flagOverlay, Usage: fmt.Sprintf("manifest overlay: one of %s or %s (default: by --%s); --route ingress only", strings.Join(deploy.Overlays(), ", "), deploy.BaseOverlay, measure.FlagIngressClass), Category: "Workload"},
		&cli.StringSliceFlag{Name: flagLabel, Usage: "extra label KEY=VALUE on every object (repeatable)", Category: "Workload"},
	}
}

// workloadParams turns the workload flags into deploy.Params for the run's
// namespace and workload name.
func workloadParams(c *cli.Context, namespace, name string) (deploy.Params, error) {
	p, err := workloadFlagsRead(c, namespace, name)
	if err != nil {
		return p, err
	}
	return p, p.Validate()
}

// workloadFlagsRead is workloadParams without checking the workload as a
// whole: measure --target renders no probe workload (its Gateway, for one,
// is the team's route's parent, not --gateway).
func workloadFlagsRead(c *cli.Context, namespace, name string) (deploy.Params, error) {
	replicas := c.Int(measure.FlagReplicas)
	if replicas < 1 || replicas > 1000 {
		return deploy.Params{}, fmt.Errorf("--%s (%d) must be 1-1000", measure.FlagReplicas, replicas)
	}
	gw, err := deploy.ParseGatewayRef(c.String(measure.FlagGateway), c.String(measure.FlagGatewaySection))
	if err != nil {
		return deploy.Params{}, err
	}
	p := deploy.Params{
		Namespace:     namespace,
		Name:          name,
		Replicas:      int32(replicas),
		Image:         c.String(measure.FlagImage),
		IngressClass:  c.String(measure.FlagIngressClass),
		Host:          c.String(measure.FlagHost),
		Hold:          c.Duration(measure.FlagHold),
		GraceMargin:   c.Duration(measure.FlagGraceMargin),
		PreStop:       c.Bool(measure.FlagPreStop),
		PreStopSleep:  c.Duration(measure.FlagPreStopSleep),
		ExitOnSigterm: c.Bool(measure.FlagExitOnTerm),
		ClockOffset:   c.Duration(measure.FlagClockOffset),
		ListenDelay:   c.Duration(measure.FlagListenDelay),
		NoReadiness:   !c.Bool(measure.FlagReadiness),
		Overlay:       c.String(flagOverlay),
		Route:         c.String(measure.FlagRoute),
		Gateway:       gw,
	}
	if p.GraceMargin == 0 {
		// deploy reads 0 as its default; a margin of 0 was asked for, and
		// would let the kubelet kill the probe as its hold ends.
		return deploy.Params{}, fmt.Errorf("--%s must be above 0", measure.FlagGraceMargin)
	}
	for _, kv := range c.StringSlice(flagLabel) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return deploy.Params{}, fmt.Errorf("--%s %q: want KEY=VALUE", flagLabel, kv)
		}
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[k] = v
	}
	return p, nil
}

func manifestsCommand() *cli.Command {
	return &cli.Command{
		Name:      "manifests",
		Usage:     "print the probe workload measure would apply (or the RBAC it needs, or measure as a CronJob), for review or GitOps",
		ArgsUsage: "[MEASURE_FLAG]...",
		UsageText: `epwindow manifests [options]

   # What measure applies through ingress-nginx, as YAML:
   epwindow manifests --ingress-class nginx --image registry.example.com/epwindow:v1 --host probe.example.com

   # The same with the AWS Load Balancer Controller (IP targets), applied by hand:
   epwindow manifests --ingress-class alb --namespace epwindow | kubectl apply -f -

   # An HTTPRoute on an existing Gateway instead of the Ingress:
   epwindow manifests --route httproute --gateway traefik/traefik-gateway --host probe.example.com

   # The ClusterRole measure needs (edit the binding's subject first):
   epwindow manifests --rbac cluster > rbac.yaml

   # The epwindow sidecar for a team's Deployment web (its app on 8080), kept in staging:
   epwindow manifests --sidecar --name web --port 8080 > sidecar.yaml
   kubectl patch deployment web --type strategic --patch-file sidecar.yaml

   # measure inside the cluster every 6 hours, its history on a volume (measure's own flags after --):
   epwindow manifests --schedule "@every 6h" --trials 10 --ingress-class nginx --image registry.example.com/epwindow:v1 \
       -- --url http://ingress-nginx-controller.ingress-nginx --observer none | kubectl apply -f -`,
		Description: `The manifests are deploy/base and deploy/overlays/<controller> (kustomize),
embedded in the binary: measure renders the same files with the same flags,
so this output is what it creates — except that measure generates the
namespace name (epwindow-xxxxx) and adds a run-id label; with
measure --namespace NS it uses NS and names the objects epwindow-<run id>.

Overlays: ` + strings.Join(deploy.Overlays(), ", ") + `. The overlay named like --ingress-class is
used; any other class gets the base with that class. --route httproute prints
deploy/httproute instead: the same Namespace, Deployment and Service, and a
Gateway API HTTPRoute on --gateway NS/NAME (--gateway-section: one listener)
for --host, PathPrefix "/", to the Service, in place of the Ingress.

--rbac prints deploy/rbac/<variant> instead: cluster (measure creates its own
namespace), namespaced (measure --namespace epwindow runs in that existing namespace),
observer (the extra Role an observer that port-forwards to the ingress
controller's pods needs in the controller's namespace), or target (measure
--target deployment/NAME in a team's namespace: a Role there, given with
--namespace, and the read-only ClusterRole).

--sidecar prints the epwindow sidecar (docs/sidecar.md) for the Deployment
--name, whose app serves on --port, instead: the strategic-merge patch that
measure --target applies, without its run annotation (for kubectl patch
deployment NAME --type strategic --patch-file FILE), or with
--sidecar-format component the same as a kustomize Component, for a staging
overlay's components:.

--schedule prints deploy/schedule instead of the probe workload: a CronJob in
--namespace that runs "epwindow measure --namespace NS --history DIR" with
--image every SCHEDULE (concurrencyPolicy Forbid: runs never overlap), its
ServiceAccount, a Role with what measure does in NS and a ClusterRole that
only reads (IngressClasses, the Gateway and its class), and a
PersistentVolumeClaim of --history-size mounted at DIR, where each run writes
run-<start>.jsonl and removes runs past --keep-runs and --keep-for. The
workload flags given are passed on to measure, and so is every argument after
--: measure's own flags, --url (the ingress as reachable from inside the
cluster) among them. The run's probe workload is not printed: measure creates
and deletes it at each run. Everything is checked as measure would check it
before anything is printed.`,
		Flags: append(append(workloadFlags(),
			&cli.StringFlag{Name: flagNamespace, Value: defaultNamespace, Usage: "namespace of the objects (measure generates one per run, or takes --namespace)"},
			&cli.StringFlag{Name: flagName, Value: defaultName, Usage: "name of the Deployment, Service and Ingress or HTTPRoute"},
			&cli.StringFlag{Name: flagRBAC, Usage: "print the RBAC variant instead: " + strings.Join(rbacVariants, ", ")},
			&cli.StringFlag{Name: flagSchedule, Usage: "print measure as a CronJob running at this schedule instead (cron, e.g. \"0 */6 * * *\", or @hourly, @every 6h)", Category: "Schedule"},
			&cli.IntFlag{Name: measure.FlagTrials, Value: defaultScheduleTrials, Usage: "with --schedule: deletions each run times", Category: "Schedule"},
			&cli.StringFlag{Name: flagHistorySize, Value: deploy.DefaultHistorySize.String(), Usage: "with --schedule: storage the history volume requests", Category: "Schedule"},
			&cli.StringFlag{Name: flagStorageClass, Usage: "with --schedule: the history volume's StorageClass (default: the cluster's default class)", Category: "Schedule"},
			&cli.IntFlag{Name: flagKeepRuns, Value: defaultKeepRuns, Usage: "with --schedule: runs the history keeps, the newest (0: any number)", Category: "Schedule"},
			&cli.DurationFlag{Name: flagKeepFor, Value: defaultKeepFor, Usage: "with --schedule: runs older than this are removed from the history (0: any age)", Category: "Schedule"},
			&cli.DurationFlag{Name: flagDocumented, Usage: "with --schedule: the preStop the platform documents, which the history's metrics server exports for the bound alert", Category: "Schedule"},
			&cli.DurationFlag{Name: flagMetricsRefresh, Value: time.Minute, Usage: "with --schedule: how often the history's metrics server reads the history again", Category: "Schedule"},
			&cli.IntFlag{Name: flagBaselineTrials, Value: results.DefaultBaselineTrials, Usage: "with --schedule: trials the metrics server's drift test pools as the baseline", Category: "Schedule"},
			&cli.IntFlag{Name: flagWindowTrials, Value: results.DefaultWindowTrials, Usage: "with --schedule: most trials of the newest runs the drift test pools against the baseline", Category: "Schedule"},
		), sidecarManifestFlags()...),
		Action: func(c *cli.Context) error {
			if c.Bool(flagSidecar) {
				return printSidecar(c)
			}
			if err := checkSidecarFlags(c); err != nil {
				return err
			}
			if c.IsSet(flagSchedule) {
				return printSchedule(c)
			}
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("manifests takes no arguments (measure's flags after -- only with --%s), got %q", flagSchedule, c.Args().Slice()), exitUsage)
			}
			for _, f := range []string{measure.FlagTrials, flagHistorySize, flagStorageClass, flagKeepRuns, flagKeepFor, flagDocumented, flagMetricsRefresh, flagBaselineTrials, flagWindowTrials} {
				if c.IsSet(f) {
					return cli.Exit(fmt.Sprintf("--%s needs --%s", f, flagSchedule), exitUsage)
				}
			}
			if v := c.String(flagRBAC); v != "" {
				return printRBAC(c, v)
			}
			p, err := workloadParams(c, c.String(flagNamespace), c.String(flagName))
			if err != nil {
				return cli.Exit(err.Error(), exitUsage)
			}
			wl, err := deploy.Render(p)
			if err != nil {
				return cli.Exit(err.Error(), exitUsage)
			}
			return deploy.WriteYAML(c.App.Writer, wl)
		},
	}
}

// printSchedule prints deploy/schedule for the flags, after checking them
// all: nothing is printed for a command line the cluster or the run would
// refuse.
func printSchedule(c *cli.Context) error {
	p, err := scheduleParams(c)
	if err != nil {
		return cli.Exit("epwindow manifests: "+err.Error(), exitUsage)
	}
	s, err := deploy.RenderSchedule(p)
	if err != nil {
		return cli.Exit("epwindow manifests: "+err.Error(), exitUsage)
	}
	need := c.Int(flagBaselineTrials) + c.Int(flagWindowTrials)
	if keep, trials := c.Int(flagKeepRuns), c.Int(measure.FlagTrials); keep > 0 && keep*trials < need {
		fmt.Fprintf(c.App.ErrWriter, "epwindow manifests: --%s %d × --%s %d keeps %d trials; the history's drift test judges a run on %d (--%s + --%s)\n",
			flagKeepRuns, keep, measure.FlagTrials, trials, keep*trials, need, flagBaselineTrials, flagWindowTrials)
	}
	return deploy.WriteYAML(c.App.Writer, s)
}

// scheduleParams turns the flags into the schedule's values: the
// CronJob's, and measure's command line, which is checked by measure's own
// parsing and validation.
func scheduleParams(c *cli.Context) (deploy.ScheduleParams, error) {
	if err := deploy.ValidateSchedule(c.String(flagSchedule)); err != nil {
		return deploy.ScheduleParams{}, err
	}
	for _, f := range []string{flagRBAC, flagName} {
		if c.IsSet(f) {
			return deploy.ScheduleParams{}, fmt.Errorf("--%s and --%s: the schedule prints no probe workload or RBAC variant (measure names its objects at each run)", f, flagSchedule)
		}
	}
	ns := c.String(flagNamespace)
	// The workload flags are checked as measure checks them.
	wp, err := workloadParams(c, ns, defaultName)
	if err != nil {
		return deploy.ScheduleParams{}, err
	}
	size, err := resource.ParseQuantity(c.String(flagHistorySize))
	if err != nil {
		return deploy.ScheduleParams{}, fmt.Errorf("--%s %q: want a quantity such as 1Gi or 500Mi", flagHistorySize, c.String(flagHistorySize))
	}
	keep := results.Retention{KeepRuns: c.Int(flagKeepRuns), KeepFor: c.Duration(flagKeepFor)}
	if err := keep.Validate(flagKeepRuns, flagKeepFor); err != nil {
		return deploy.ScheduleParams{}, err
	}
	args := []string{
		fmt.Sprintf("--%s=%d", measure.FlagTrials, c.Int(measure.FlagTrials)),
		fmt.Sprintf("--%s=%d", flagKeepRuns, keep.KeepRuns),
		fmt.Sprintf("--%s=%s", flagKeepFor, keep.KeepFor),
	}
	given, err := givenWorkloadArgs(c)
	if err != nil {
		return deploy.ScheduleParams{}, err
	}
	args = append(args, given...)
	passed := c.Args().Slice()
	if err := checkPassedArgs(passed); err != nil {
		return deploy.ScheduleParams{}, err
	}
	args = append(args, passed...)
	cfg, err := checkMeasureArgs(append(args, "--"+flagHistoryDir+"="+deploy.HistoryMountPath, "--"+measure.FlagNamespace+"="+ns))
	if err != nil {
		return deploy.ScheduleParams{}, err
	}
	if w := observerWarning(cfg); w != "" {
		fmt.Fprintf(c.App.ErrWriter, "epwindow manifests: %s\n", w)
	}
	if c.Duration(flagMetricsRefresh) <= 0 {
		return deploy.ScheduleParams{}, fmt.Errorf("--%s %s: want a positive duration", flagMetricsRefresh, c.Duration(flagMetricsRefresh))
	}
	// The drift test's sizes reach the metrics server only when given:
	// otherwise it runs with history's defaults.
	var sizes [2]int
	for i, f := range []string{flagBaselineTrials, flagWindowTrials} {
		if n := c.Int(f); n < 1 {
			return deploy.ScheduleParams{}, fmt.Errorf("--%s %d: want a positive number of trials", f, n)
		} else if c.IsSet(f) {
			sizes[i] = n
		}
	}
	// measure's retention keeps what the server's drift test rests on:
	// the same sizes.
	for i, f := range []string{flagBaselineTrials, flagWindowTrials} {
		if sizes[i] > 0 {
			args = append(args, fmt.Sprintf("--%s=%d", f, sizes[i]))
		}
	}
	return deploy.ScheduleParams{
		Namespace:         ns,
		Schedule:          c.String(flagSchedule),
		Image:             wp.Image,
		HistorySize:       size,
		StorageClass:      c.String(flagStorageClass),
		Args:              args,
		Labels:            wp.Labels,
		DocumentedPreStop: c.Duration(flagDocumented),
		MetricsRefresh:    c.Duration(flagMetricsRefresh),
		BaselineTrials:    sizes[0],
		WindowTrials:      sizes[1],
	}, nil
}

// givenWorkloadArgs are the workload flags set on the command line, as
// measure's arguments.
func givenWorkloadArgs(c *cli.Context) ([]string, error) {
	var out []string
	for _, f := range workloadFlags() {
		name := f.Names()[0]
		if !c.IsSet(name) {
			continue
		}
		switch f.(type) {
		case *cli.StringSliceFlag:
			for _, v := range c.StringSlice(name) {
				out = append(out, fmt.Sprintf("--%s=%s", name, v))
			}
		case *cli.BoolFlag:
			out = append(out, fmt.Sprintf("--%s=%t", name, c.Bool(name)))
		case *cli.IntFlag:
			out = append(out, fmt.Sprintf("--%s=%d", name, c.Int(name)))
		case *cli.DurationFlag:
			out = append(out, fmt.Sprintf("--%s=%s", name, c.Duration(name)))
		case *cli.StringFlag:
			out = append(out, fmt.Sprintf("--%s=%s", name, c.String(name)))
		default:
			// A new kind of workload flag: a build bug, caught by the tests.
			return nil, fmt.Errorf("--%s: no way to pass a %T on to measure", name, f)
		}
	}
	return out, nil
}

// checkPassedArgs refuses, among measure's flags after --, those the
// schedule sets itself, and the cluster flags: the run uses its
// ServiceAccount.
func checkPassedArgs(args []string) error {
	owned := map[string]string{
		measure.FlagTrials: "give it before --", flagKeepRuns: "give it before --", flagKeepFor: "give it before --",
		flagBaselineTrials: "give it before --", flagWindowTrials: "give it before --",
		flagHistoryDir: "the schedule mounts its volume there", measure.FlagOut: "the run writes into the history volume",
	}
	for _, f := range workloadFlags() {
		for _, n := range f.Names() {
			owned[n] = "give it before --"
		}
	}
	for _, f := range kubeFlags("") {
		for _, n := range f.Names() {
			owned[n] = "the run uses its ServiceAccount in --namespace"
		}
	}
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if why, ok := owned[name]; ok {
			return fmt.Errorf("%s after --: the schedule sets it (%s)", a, why)
		}
	}
	return nil
}

// checkMeasureArgs parses and checks the run's command line as measure
// does, so that a flag measure would refuse in the cluster (exit 2, at
// every run) is refused here, before anything is printed. The history
// folder is not checked: it exists only in the pod.
func checkMeasureArgs(args []string) (measure.Config, error) {
	cmd := measureCommand()
	var cfg measure.Config
	var cfgErr error
	cmd.Action = func(c *cli.Context) error {
		if cfg, cfgErr = measureConfig(c); cfgErr != nil {
			return nil
		}
		_, cfgErr = measureOptions(c)
		return nil
	}
	app := &cli.App{Name: "epwindow", Commands: []*cli.Command{cmd}, Writer: io.Discard, ErrWriter: io.Discard}
	if err := app.Run(append([]string{"epwindow", cmd.Name}, args...)); err != nil {
		return cfg, fmt.Errorf("measure's flags after --: %w", err)
	}
	if cfgErr != nil {
		return cfg, fmt.Errorf("the scheduled measure (its own flags go after --): %w", cfgErr)
	}
	return cfg, nil
}

// observerWarning says when the scheduled run's observer would read the
// ingress controller through port-forwards to its pods, which the
// schedule's ServiceAccount may not do (that is deploy/rbac/observer's
// Role, in the controller's namespace); "" when it reads a URL or nothing.
func observerWarning(cfg measure.Config) string {
	if cfg.Observer == upstream.KindNone || cfg.Observer == upstream.KindCmd || len(cfg.ObserverOptions.URLs) > 0 {
		return ""
	}
	return fmt.Sprintf("--%s %s reads the ingress controller by port-forwarding to its pods, which the schedule's ServiceAccount %s/%s may not do: "+
		"after --, give --%s (reachable from inside the cluster) or --%s %s, or bind the Role of `epwindow manifests --%s observer` to that ServiceAccount in the controller's namespace",
		measure.FlagObserver, cfg.Observer, cfg.Namespace, deploy.ScheduleName, flagObserverURL, measure.FlagObserver, upstream.KindNone, flagRBAC)
}

// printRBAC prints deploy/rbac/<variant>; the target variant's Role goes
// in --namespace when it is given (the team's namespace).
func printRBAC(c *cli.Context, variant string) error {
	if !slices.Contains(rbacVariants, variant) {
		return cli.Exit(fmt.Sprintf("--%s %q: want one of %s", flagRBAC, variant, strings.Join(rbacVariants, ", ")), exitUsage)
	}
	var out []byte
	var err error
	if variant == "target" && c.IsSet(flagNamespace) {
		if out, err = deploy.KustomizeIn("rbac/"+variant, c.String(flagNamespace)); err != nil {
			return cli.Exit(fmt.Sprintf("--%s: %v", flagNamespace, err), exitUsage)
		}
	} else if out, err = deploy.Kustomize("rbac/" + variant); err != nil {
		return err
	}
	_, err = c.App.Writer.Write(out)
	return err
}
