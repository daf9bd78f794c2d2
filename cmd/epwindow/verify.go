package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/results"
	"github.com/epwindow/epwindow/verify"
)

// Flags of verify that are not verify.Flag* constants.
const flagJUnit = "junit"

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "roll your Deployment under load and fail unless no request failed (a pipeline gate)",
		ArgsUsage: "DEPLOYMENT",
		UsageText: `epwindow verify -n NS DEPLOYMENT --url http://ingress.example.internal --host app.example.com [options]

   # three restarts under 200 req/s of POST, JUnit for CI, a PR comment on stdout:
   epwindow verify -n shop checkout --url http://10.0.0.10 --host checkout.example.com \
       --method POST --rate 200 --rollouts 3 --check-port 8080/healthz \
       --junit verify.xml --format markdown`,
		Description: `Drives steady load through --url (the ingress) at the Deployment's route and restarts the
Deployment --rollouts times (the annotation kubectl rollout restart sets, the only change made), or
with --watch waits for rollouts started elsewhere. Per rollout it reports responses by outcome, each
failure's time from the pod deletion or Ready it follows (shutdown or startup side), the replaced
pods' exit codes (137 = SIGKILL at the end of the grace period), the rollout's duration and, with
--check-port, whether each terminating pod still answered on its own port after its address left
the EndpointSlices. With --sidecar, the Deployment must keep the epwindow sidecar (epwindow
manifests --sidecar; else exit 2), and each replaced pod's window — its last traffic after its
deletion, as the sidecar saw it, "≥" when the app stopped listening while still routed or
requests to it failed, or "unreadable" and why — is reported beside the rollout's failures; the
windows do not change the verdict.

Before anything else a 3 s baseline must get 2xx answers through --url with --host, and the
route of --host/--path must lead (Ingress or HTTPRoute, then Service) to the Deployment's pods
(--route-check=false skips that for routes the tool cannot read): else exit 2 at once.

Then, unless --self-test=false, the same load runs against a broken canary of its own (the probe
refusing new connections from SIGTERM on while it keeps its process and address, no preStop)
behind the same ingress class, in a namespace it creates and deletes. If that canary fails no
request, the gate is blind here: exit 7, Deployment untouched.

Failures are counted by their scheduled instant until max(2 s, window) after a rollout's last
replaced pod is gone. Exits of replaced containers (app, init, native sidecar, and their
restarts): 137 and OOMKilled fail the gate; 143 (SIGTERM not handled) and any other non-zero
exit fail it unless --allow-exit-codes lists them.

Exit codes: 0 pass; 3 the gate failed (a failed request beyond --max-failures, a failed exit, a
dirty baseline, or a rollout not complete, which also stops further rollouts); 7 the self-test
is blind; 2 bad input; 4 cluster unusable; 5 a permission is missing; 1 the run could not
decide (e.g. failures lost); 130 interrupted (a rollout already started is the Deployment
controller's to finish).`,
		Flags:  verifyFlags(),
		Action: runVerify,
	}
}

func verifyFlags() []cli.Flag {
	return append(kubeFlags("namespace of the Deployment (default: the kubeconfig context's, else default)"),
		&cli.StringFlag{Name: verify.FlagURL, Usage: "the ingress as reachable from here, e.g. http://127.0.0.1:9090 (required)", Category: "Load"},
		&cli.StringFlag{Name: verify.FlagHost, Usage: "Host header of the Deployment's route (default: --url's host)", Category: "Load"},
		&cli.StringFlag{Name: verify.FlagPath, Value: "/", Usage: "path requested on the route", Category: "Load"},
		&cli.StringFlag{Name: verify.FlagMethod, Value: "GET", Usage: "GET or POST: ingress controllers retry a refused GET on another pod but never a POST, so POST shows what non-idempotent clients see", Category: "Load"},
		&cli.StringFlag{Name: verify.FlagBody, Usage: "body of each POST (default: a short fixed one)", Category: "Load"},
		&cli.Float64Flag{Name: verify.FlagRate, Value: 50, Usage: "requests per second; use production's, or see the shape warning", Category: "Load"},
		&cli.DurationFlag{Name: verify.FlagLoadTimeout, Value: 5 * time.Second, Usage: "timeout of one request", Category: "Load"},
		&cli.StringFlag{Name: verify.FlagIngressCA, Usage: "PEM file of the CA that signs an https --url's certificate (default: the system roots); the server name is --host", Category: "Load"},
		&cli.BoolFlag{Name: verify.FlagIngressInsecure, Usage: "do not verify an https --url's certificate (not the API server's: that is --insecure-skip-tls-verify)", Category: "Load"},
		&cli.IntFlag{Name: verify.FlagRollouts, Value: 3, Usage: "rollouts to run (or, with --watch, to wait for)", Category: "Rollouts"},
		&cli.BoolFlag{Name: verify.FlagWatch, Usage: "do not restart: wait for rollouts started elsewhere (a CD pipeline)", Category: "Rollouts"},
		&cli.DurationFlag{Name: verify.FlagTimeout, Value: 10 * time.Minute, Usage: "longest a rollout may take (with --watch: to start and finish)", Category: "Rollouts"},
		&cli.BoolFlag{Name: verify.FlagAllowSingleReplica, Usage: "roll a Deployment with fewer than 2 ready replicas", Category: "Rollouts"},
		&cli.IntFlag{Name: verify.FlagMaxFailures, Value: 0, Usage: "failed requests tolerated over all rollouts", Category: "Gate"},
		&cli.StringFlag{Name: verify.FlagAllowExitCodes, Usage: "non-zero exit codes of replaced containers that do not fail the gate, e.g. 143,1 (137 and OOMKilled always do)", Category: "Gate"},
		&cli.BoolFlag{Name: verify.FlagRouteCheck, Value: true, Usage: "check that the route of --host/--path leads to a Service selecting the Deployment's pods (false: a route the tool cannot read, e.g. an external load balancer)", Category: "Gate"},
		&cli.StringFlag{Name: verify.FlagCheckPort, Usage: "PORT[/PATH]: read each pod's own port through the API server's pod proxy (the mechanism check; needs get pods/proxy)", Category: "Gate"},
		&cli.BoolFlag{Name: verify.FlagSidecar, Usage: "report each replaced pod's window, its last traffic after its deletion, as the epwindow sidecar the Deployment keeps measured it (epwindow manifests --sidecar; needs get pods/proxy); information beside the failures, not judged", Category: "Gate"},
		&cli.BoolFlag{Name: verify.FlagSelfTest, Value: true, Usage: "first prove the gate can fail, against a broken canary of its own (refuses connections from SIGTERM on, keeps its address)", Category: "Gate"},
		&cli.StringFlag{Name: verify.FlagIngressClass, Usage: "the canary's ingress class (default: the class of the Ingress routing to the Deployment)", Category: "Gate"},
		&cli.StringFlag{Name: verify.FlagImage, Value: deploy.DefaultImage, Usage: "the probe image for the canary", Category: "Gate"},
		&cli.StringFlag{Name: verify.FlagWindowFrom, Usage: "a measure results file: its longest window gives the shape warning", Category: "Gate"},
		&cli.StringFlag{Name: flagFormat, Value: "text", Usage: "report on stdout: text, json or markdown (a pull-request comment)", Category: "Output"},
		&cli.StringFlag{Name: flagJUnit, Usage: "also write JUnit XML here, one test case per rollout", Category: "Output"},
	)
}

// verifyConfig turns flags and the argument into a validated verify.Config.
// The namespace is kubectl's: -n, else the kubeconfig context's; reading
// the kubeconfig for it is the one error (a kubeError) not of the flags.
func verifyConfig(c *cli.Context) (verify.Config, error) {
	cfg := verify.Config{
		Host:   c.String(verify.FlagHost),
		Method: strings.ToUpper(c.String(verify.FlagMethod)), Body: c.String(verify.FlagBody),
		Rate: c.Float64(verify.FlagRate), LoadTimeout: c.Duration(verify.FlagLoadTimeout),
		Rollouts: c.Int(verify.FlagRollouts), Watch: c.Bool(verify.FlagWatch), Timeout: c.Duration(verify.FlagTimeout),
		MaxFailures: c.Int(verify.FlagMaxFailures), SelfTest: c.Bool(verify.FlagSelfTest), SelfTestImage: c.String(verify.FlagImage),
		IngressClass: c.String(verify.FlagIngressClass), AllowSingleReplica: c.Bool(verify.FlagAllowSingleReplica),
		Sidecar: c.Bool(verify.FlagSidecar), Clock: clock.RealClock{},
	}
	switch c.NArg() {
	case 1:
		cfg.Deployment = c.Args().First()
	case 0:
		return cfg, errors.New("name the Deployment: epwindow verify -n NS DEPLOYMENT --url ...")
	default:
		return cfg, fmt.Errorf("one DEPLOYMENT, got %d arguments: %q", c.NArg(), c.Args().Slice())
	}
	if s := c.String(verify.FlagURL); s != "" {
		u, err := url.Parse(s)
		if err != nil {
			return cfg, fmt.Errorf("--%s %q: %w", verify.FlagURL, s, err)
		}
		p := c.String(verify.FlagPath)
		if !strings.HasPrefix(p, "/") {
			return cfg, fmt.Errorf("--%s %q must start with /", verify.FlagPath, p)
		}
		u.Path = path.Join(u.Path, p)
		if strings.HasSuffix(p, "/") && !strings.HasSuffix(u.Path, "/") {
			u.Path += "/"
		}
		cfg.URL = u
	}
	cfg.NoRouteCheck = !c.Bool(verify.FlagRouteCheck)
	codes, err := verify.ParseExitCodes(c.String(verify.FlagAllowExitCodes))
	if err != nil {
		return cfg, err
	}
	cfg.AllowExitCodes = codes
	tlsCfg, err := verify.IngressTLS(c.String(verify.FlagIngressCA), c.Bool(verify.FlagIngressInsecure), cfg.URL)
	if err != nil {
		return cfg, err
	}
	cfg.TLS = tlsCfg
	if s := c.String(verify.FlagCheckPort); s != "" {
		cp, err := verify.ParseCheckPort(s)
		if err != nil {
			return cfg, err
		}
		cfg.CheckPort = cp
	}
	if p := c.String(verify.FlagWindowFrom); p != "" {
		file, err := readResults(p, os.Stdin)
		if err != nil {
			return cfg, fmt.Errorf("--%s: %w", verify.FlagWindowFrom, err)
		}
		// The longest window seen, a trial cut at the hold at least its
		// seen value: the test must see even that one.
		w, _, ok := results.LongestWindow(file.Trials)
		if !ok {
			return cfg, fmt.Errorf("--%s %s: no trial with a valid window", verify.FlagWindowFrom, p)
		}
		cfg.Window, cfg.WindowSource = w, p
	}
	if _, ok := verify.Reporters[c.String(flagFormat)]; !ok {
		return cfg, fmt.Errorf("--%s %q: want text, json or markdown", flagFormat, c.String(flagFormat))
	}
	ns, _, err := kubeNamespace(c)
	if err != nil {
		return cfg, err
	}
	cfg.Namespace = ns
	return cfg, cfg.Validate()
}

func runVerify(c *cli.Context) error {
	cfg, err := verifyConfig(c)
	if ke := (*kubeError)(nil); errors.As(err, &ke) {
		return cli.Exit("epwindow verify: "+err.Error(), ke.code)
	} else if err != nil {
		return cli.Exit("epwindow verify: "+err.Error(), exitUsage)
	}
	kc, err := kube(c)
	if err != nil {
		return cli.Exit("epwindow verify: "+err.Error(), kubeExitCode(err))
	}
	client := kc.client
	if _, err := client.Discovery().ServerVersion(); err != nil {
		return cli.Exit(fmt.Sprintf("epwindow verify: cannot reach the API server (check --%s / --%s): %v", flagKubeconfig, flagContext, err), exitCluster)
	}
	cfg.Client = client
	if dyn, err := dynamic.NewForConfig(kc.config); err == nil {
		cfg.Dynamic = dyn
	}
	rep, runErr := verify.Run(c.Context, cfg, func(s string) { fmt.Fprintln(c.App.ErrWriter, s) })

	// Whatever happened, say what was found.
	if rep != nil && (len(rep.Rollouts) > 0 || rep.SelfTest != nil || runErr == nil) {
		if err := verify.Reporters[c.String(flagFormat)](c.App.Writer, rep); err != nil {
			return cli.Exit("epwindow verify: render report: "+err.Error(), exitFailure)
		}
		if p := c.String(flagJUnit); p != "" {
			if err := writeJUnit(p, rep); err != nil {
				return cli.Exit("epwindow verify: --"+flagJUnit+": "+err.Error(), exitFailure)
			}
		}
	} else if rep != nil {
		for _, n := range rep.Notes {
			fmt.Fprintln(c.App.ErrWriter, "note:", n)
		}
	}
	var usageErr *verify.UsageError
	var missing *verify.MissingError
	switch {
	case runErr == nil:
	case c.Context.Err() != nil:
		msg := "epwindow verify: interrupted; the load and the self-test stopped and its namespace was deleted"
		for _, n := range rep.Notes {
			msg += "; " + n
		}
		return cli.Exit(msg, exitInterrupted)
	case errors.As(runErr, &missing), apierrors.IsForbidden(runErr):
		return cli.Exit("epwindow verify: "+runErr.Error(), exitForbidden)
	case errors.As(runErr, &usageErr):
		return cli.Exit("epwindow verify: "+runErr.Error(), exitUsage)
	default:
		return cli.Exit("epwindow verify: "+runErr.Error(), exitFailure)
	}
	switch {
	case rep.Verdict.Blind:
		return cli.Exit("epwindow verify: the self-test is blind; the Deployment was not touched", exitBlind)
	case !rep.Verdict.Pass:
		return cli.Exit("epwindow verify: the gate failed", exitThreshold)
	}
	return nil
}

func writeJUnit(p string, rep *verify.Report) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if err := verify.JUnit(f, rep); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
