package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure"
)

// Flags of `epwindow manifests` beyond the workload flags it shares with
// measure.
const (
	flagNamespace = "namespace"
	flagName      = "name"
	flagOverlay   = "overlay"
	flagLabel     = "label"
	flagRBAC      = "rbac"
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
var rbacVariants = []string{"cluster", "namespaced", "observer"}

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
	return p, p.Validate()
}

func manifestsCommand() *cli.Command {
	return &cli.Command{
		Name:  "manifests",
		Usage: "print the probe workload measure would apply (or the RBAC it needs), for review or GitOps",
		UsageText: `epwindow manifests [options]

   # What measure applies through ingress-nginx, as YAML:
   epwindow manifests --ingress-class nginx --image registry.example.com/epwindow:v1 --host probe.example.com

   # The same with the AWS Load Balancer Controller (IP targets), applied by hand:
   epwindow manifests --ingress-class alb --namespace epwindow | kubectl apply -f -

   # An HTTPRoute on an existing Gateway instead of the Ingress:
   epwindow manifests --route httproute --gateway traefik/traefik-gateway --host probe.example.com

   # The ClusterRole measure needs (edit the binding's subject first):
   epwindow manifests --rbac cluster > rbac.yaml`,
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
namespace), namespaced (measure --namespace epwindow runs in that existing namespace), or
observer (the extra Role an observer that port-forwards to the ingress
controller's pods needs in the controller's namespace).`,
		Flags: append(workloadFlags(),
			&cli.StringFlag{Name: flagNamespace, Value: defaultNamespace, Usage: "namespace of the objects (measure generates one per run, or takes --namespace)"},
			&cli.StringFlag{Name: flagName, Value: defaultName, Usage: "name of the Deployment, Service and Ingress or HTTPRoute"},
			&cli.StringFlag{Name: flagRBAC, Usage: "print the RBAC variant instead: " + strings.Join(rbacVariants, ", ")},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("manifests takes no arguments, got %q", c.Args().Slice()), exitUsage)
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

func printRBAC(c *cli.Context, variant string) error {
	for _, v := range rbacVariants {
		if v == variant {
			out, err := deploy.Kustomize("rbac/" + v)
			if err != nil {
				return err
			}
			_, err = c.App.Writer.Write(out)
			return err
		}
	}
	return cli.Exit(fmt.Sprintf("--%s %q: want one of %s", flagRBAC, variant, strings.Join(rbacVariants, ", ")), exitUsage)
}
