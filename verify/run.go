package verify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/epwindow/epwindow/measure/load"
)

// UsageError is a problem with what verify was asked to do (a flag, the
// Deployment's state); nothing was changed.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usage(format string, a ...any) error { return &UsageError{Err: fmt.Errorf(format, a...)} }

// Defaults the flags do not set.
const (
	// baseline is how long the load runs before the first rollout: long
	// enough for every replica to get requests at any sane rate.
	baseline = 3 * time.Second
	// defaultLag is how long an ingress is assumed to route to a pod after
	// its address left the slices when no window is known (Skipper's
	// default poll, 3 s, plus margin; --window-from replaces it).
	defaultLag = 5 * time.Second
	// minTail is the least time failures are collected after a rollout's
	// last replaced pod is gone.
	minTail = 2 * time.Second
)

// runner is one run's state.
type runner struct {
	cfg      Config
	clk      clock.Clock
	progress func(string)
	id       string
}

func (r *runner) say(format string, a ...any) { r.progress(fmt.Sprintf(format, a...)) }

// sleep waits one poll, or until deadline; it fails when ctx ends or the
// deadline has passed.
func (r *runner) sleep(ctx context.Context, deadline time.Time) error {
	left := deadline.Sub(r.clk.Now())
	if left <= 0 {
		return errors.New("deadline passed")
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-r.clk.After(min(left, pollEvery)):
		return nil
	}
}

// Run verifies cfg.Deployment and returns the report. An error means the
// run could not decide (bad input, a missing permission, the cluster, or
// Ctrl-C); the report is then partial but still says what happened,
// including a rollout verify started and left to the Deployment controller.
// A verdict that fails, or a blind self-test, is not an error.
func Run(ctx context.Context, cfg Config, progress func(string)) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, &UsageError{Err: err}
	}
	if cfg.Client == nil {
		return nil, errors.New("no cluster client: check --kubeconfig / --context")
	}
	if progress == nil {
		progress = func(string) {}
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	r := &runner{cfg: cfg, clk: clk, progress: progress, id: newID()}
	rep := &Report{Namespace: cfg.Namespace, Deployment: cfg.Deployment, URL: cfg.URL.String(), Host: cfg.Host,
		Method: cfg.Method, Rate: cfg.Rate, MaxFailures: cfg.MaxFailures, Watch: cfg.Watch, Rollouts: []Rollout{}}

	if err := Preflight(ctx, cfg, r.selfTestNamespace()); err != nil {
		return rep, err
	}
	d, err := cfg.Client.AppsV1().Deployments(cfg.Namespace).Get(ctx, cfg.Deployment, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return rep, usage("deployment %q not found in namespace %q (DEPLOYMENT, -n)", cfg.Deployment, cfg.Namespace)
	}
	if err != nil {
		return rep, fmt.Errorf("get deployment %s/%s: %w", cfg.Namespace, cfg.Deployment, err)
	}
	if err := checkDeployment(d, cfg); err != nil {
		return rep, err
	}
	rep.Replicas = int(d.Status.ReadyReplicas)

	var window time.Duration
	source := ""
	if cfg.Window > 0 {
		window, source = cfg.Window, "--"+FlagWindowFrom+" "+cfg.WindowSource
	}
	if cfg.SelfTest {
		lag := defaultLag
		if window > 0 {
			lag = window
		}
		st, err := r.selfTest(ctx, d, lag)
		rep.SelfTest = st
		if err != nil {
			return rep, fmt.Errorf("self-test: %w", err)
		}
		if st.Blind {
			st.Cause = blindCause(cfg.Method, shapeFor(window, source, cfg.Rate, rep.Replicas))
			rep.Verdict = decide(rep, cfg.Rollouts)
			return rep, nil
		}
		if window == 0 && st.WindowNS > 0 {
			window, source = time.Duration(st.WindowNS), "self-test"
		}
	}
	rep.Shape = shapeFor(window, source, cfg.Rate, rep.Replicas)

	err = r.verify(ctx, d, rep, window)
	rep.Verdict = decide(rep, cfg.Rollouts)
	return rep, err
}

// checkDeployment refuses what verify must not roll: a Deployment with
// fewer than 2 ready replicas (unless allowed), or one whose own rollout
// is still going (unless --watch, which waits for those).
func checkDeployment(d *appsv1.Deployment, cfg Config) error {
	if d.Spec.Paused && !cfg.Watch {
		return usage("deployment %s/%s is paused: a restart would not roll it (kubectl rollout resume)", d.Namespace, d.Name)
	}
	if d.Status.ReadyReplicas < 2 && !cfg.AllowSingleReplica {
		return usage("deployment %s/%s has %d ready replicas: with fewer than 2 every rollout has a moment with nothing serving; scale it up or pass --%s",
			d.Namespace, d.Name, d.Status.ReadyReplicas, FlagAllowSingleReplica)
	}
	if d.Status.ReadyReplicas < 1 {
		return usage("deployment %s/%s has no ready replica", d.Namespace, d.Name)
	}
	if done, failed := rolloutComplete(d); !done && !cfg.Watch {
		why := "a rollout is in progress"
		if failed != "" {
			why = "its last rollout failed (" + failed + ")"
		}
		return usage("deployment %s/%s: %s; wait for it (kubectl rollout status) or pass --%s", d.Namespace, d.Name, why, FlagWatch)
	}
	return nil
}

// verify drives the load at the team's Deployment and runs the rollouts.
func (r *runner) verify(ctx context.Context, d *appsv1.Deployment, rep *Report, window time.Duration) error {
	cfg := r.cfg
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return fmt.Errorf("deployment %s/%s selector: %w", d.Namespace, d.Name, err)
	}
	// Everything below stops with this context: the load and the watches
	// end with the run, on Ctrl-C too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tr := newTracker(cfg.Client, r.clk, cfg.Namespace, sel)
	if err := tr.start(ctx); err != nil {
		return err
	}
	gen, err := load.New(load.Config{URL: cfg.URL.String(), Host: cfg.Host, Rate: cfg.Rate, Timeout: cfg.LoadTimeout,
		Method: cfg.Method, Body: cfg.Body}, r.clk)
	if err != nil {
		return &UsageError{Err: err}
	}
	loadDone := make(chan struct{})
	go func() { _ = gen.Run(ctx); close(loadDone) }()
	defer func() { cancel(); <-loadDone }()
	if cfg.CheckPort != nil {
		go tr.checkPorts(ctx, *cfg.CheckPort, cfg.pollInterval())
	}
	tg := &target{ns: cfg.Namespace, name: cfg.Deployment, track: tr, gen: gen, lag: defaultLag,
		tail: max(minTail, window), check: cfg.CheckPort != nil, res: cfg.pollInterval()}
	if window > 0 {
		tg.lag = window
	}

	// Baseline: the route must answer 2xx before anything is rolled.
	r.say("load: %g req/s %s %s (Host %s); baseline for %s", cfg.Rate, cfg.Method, cfg.URL, cfg.Host, baseline)
	start := r.clk.Now()
	if err := r.sleep2(ctx, baseline); err != nil {
		return err
	}
	end := r.clk.Now()
	if err := gen.Settle(ctx, end); err != nil {
		return err
	}
	b := outcomesOf(gen.FailureEvents(start, end))
	b.OK = gen.Totals().OK
	rep.Baseline = &b
	if b.OK == 0 {
		if upstreamDown(b) {
			// The ingress took the request and found no pod answering: the
			// flags reach the route; the Deployment does not serve yet.
			return usage("no 2xx response from --%s %s with --%s %q in %s (%s): the ingress routes there but no pod of deployment/%s answered; is it listening on its Service's targetPort yet? (kubectl -n %s get endpointslices,pods)",
				FlagURL, cfg.URL, FlagHost, cfg.Host, baseline, b, cfg.Deployment, cfg.Namespace)
		}
		return usage("no 2xx response from --%s %s with --%s %q in %s (%s): check --%s, --%s and --%s", FlagURL, cfg.URL, FlagHost, cfg.Host, baseline, b, FlagURL, FlagHost, FlagPath)
	}

	for n := 1; n <= cfg.Rollouts; n++ {
		started := false
		ro, err := r.rollout(ctx, tg, n, cfg.Watch, func() { started = true })
		if started || cfg.Watch && !ro.Started.IsZero() {
			rep.Rollouts = append(rep.Rollouts, ro)
		}
		if err != nil {
			if ctx.Err() != nil {
				rep.Interrupted = true
				if started && !ro.Complete {
					rep.Notes = append(rep.Notes, fmt.Sprintf("rollout %d was started by verify before the interrupt; the Deployment controller finishes it (kubectl -n %s rollout status deployment/%s)",
						n, cfg.Namespace, cfg.Deployment))
				}
			}
			return err
		}
		r.say("rollout %d: %s", n, ro.Outcomes)
	}
	return nil
}

// sleep2 waits d or until ctx ends.
func (r *runner) sleep2(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-r.clk.After(d):
		return nil
	}
}

// outcomesOf counts failure events by kind (2xx without the probe's header
// are successes here; drops are counted apart).
func outcomesOf(fs []load.Failure) Outcomes {
	o := Outcomes{}
	for _, f := range fs {
		switch f.Kind {
		case load.KindUnattributed:
		case load.KindDropped:
			o.Dropped++
		default:
			if o.Failed == nil {
				o.Failed = map[string]int{}
			}
			o.Failed[f.Kind]++
		}
	}
	return o
}

func newID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// upstreamDown tells whether most of the baseline's failures are the
// ingress's own answers for an upstream it could not reach (502, 503, 504):
// the request matched a route, so the URL and Host are not the problem.
func upstreamDown(b Outcomes) bool {
	n := b.Failed["status_502"] + b.Failed["status_503"] + b.Failed["status_504"]
	return n > 0 && 2*n > b.Failures()
}
