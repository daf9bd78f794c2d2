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

	"github.com/epwindow/epwindow/deploy"
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

// timing is a target's lag (attribution) and tail (failure collection)
// for a window (0: none known, so defaultLag). The tail is at least the lag:
// a failure while the ingress may still route to a vanished address is the
// rollout's, and attribution assumes it may come that late.
func timing(window time.Duration) (lag, tail time.Duration) {
	lag = defaultLag
	if window > 0 {
		lag = window
	}
	return lag, max(minTail, lag)
}

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
		Method: cfg.Method, Rate: cfg.Rate, MaxFailures: cfg.MaxFailures, AllowExitCodes: cfg.AllowExitCodes, Requested: cfg.Rollouts, Watch: cfg.Watch, Sidecar: cfg.Sidecar, Rollouts: []Rollout{}}

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
	if cfg.NoRouteCheck {
		rep.RouteCheck = "not checked (--" + FlagRouteCheck + "=false): the load may reach another backend than the Deployment's pods"
	} else if rep.RouteCheck, err = r.checkRoute(ctx, d); err != nil {
		return rep, err
	}

	var window time.Duration
	source := ""
	if cfg.Window > 0 {
		window, source = cfg.Window, "--"+FlagWindowFrom+" "+cfg.WindowSource
	}
	// Everything below stops with this context: the load and the watches
	// end with the run, on Ctrl-C too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tg, err := r.startTeam(ctx, d, window)
	if err != nil {
		return rep, err
	}
	defer tg.stop()
	// The baseline comes before anything else: a wrong --url or --host
	// fails here in seconds, not after the self-test.
	if err := r.baseline(ctx, tg, rep); err != nil {
		return rep, err
	}

	if cfg.SelfTest {
		st, err := r.selfTest(ctx, d, window)
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
			tg.lag, tg.tail = timing(window)
		}
	}
	rep.Shape = shapeFor(window, source, cfg.Rate, rep.Replicas)
	// The team's load kept running through the self-test: what failed then
	// is before any rollout, so the baseline — unless --watch follows a
	// rollout that was already running, whose failures are its own.
	if tg.watch == nil || !tg.watch.inProgress {
		if err := r.extendBaseline(ctx, tg, rep); err != nil {
			return rep, err
		}
	}

	err = r.verify(ctx, tg, rep)
	rep.Verdict = decide(rep, cfg.Rollouts)
	if err != nil && ctx.Err() == nil {
		// The run could not decide (exit 1): its report must not pass.
		rep.Verdict.Pass = false
		rep.Verdict.Reasons = append(rep.Verdict.Reasons, "the run failed: "+err.Error())
	}
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
	if c, _ := deploy.TemplateSidecar(d.Spec.Template); c == nil && cfg.Sidecar {
		return noSidecar(d)
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

// teamTarget is the team's Deployment under load, from before the baseline
// to the end of the run.
type teamTarget struct {
	*target
	start time.Time
	stop  func()
}

// startTeam starts following the team's pods and driving the load at its
// route. With --watch, the Deployment's template is read first, so that a
// rollout starting from here on (during the self-test too) is followed.
func (r *runner) startTeam(ctx context.Context, d *appsv1.Deployment, window time.Duration) (*teamTarget, error) {
	cfg := r.cfg
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("deployment %s/%s selector: %w", d.Namespace, d.Name, err)
	}
	tg := &target{ns: cfg.Namespace, name: cfg.Deployment, check: cfg.CheckPort != nil, sidecar: cfg.Sidecar, res: cfg.pollInterval()}
	tg.lag, tg.tail = timing(window)
	if cfg.Watch {
		tg.watch = newWatchState(d)
	}
	ctx, cancel := context.WithCancel(ctx)
	tg.track = newTracker(cfg.Client, r.clk, cfg.Namespace, sel)
	if err := tg.track.start(ctx); err != nil {
		cancel()
		return nil, err
	}
	if w := tg.watch; w != nil && !w.inProgress {
		// Pods already terminating now are of a rollout that ended before
		// verify started, not of the next one.
		w.since = r.clk.Now()
	}
	// The team's app answers without the probe's header: those 2xx are
	// successes, kept out of the failure history (load.Config).
	gen, err := load.New(load.Config{URL: cfg.URL.String(), Host: cfg.Host, Rate: cfg.Rate, Timeout: cfg.LoadTimeout,
		Method: cfg.Method, Body: cfg.Body, TLS: cfg.TLS, UnattributedOK: true}, r.clk)
	if err != nil {
		cancel()
		return nil, &UsageError{Err: err}
	}
	tg.gen = gen
	loadDone := make(chan struct{})
	go func() { _ = gen.Run(ctx); close(loadDone) }()
	if cfg.CheckPort != nil {
		go tg.track.checkPorts(ctx, *cfg.CheckPort, cfg.pollInterval())
	}
	if cfg.Sidecar {
		go tg.track.readSidecars(ctx)
	}
	return &teamTarget{target: tg, start: r.clk.Now(), stop: func() { cancel(); <-loadDone }}, nil
}

// baseline runs the load for the baseline: the route must answer 2xx
// before anything else happens.
func (r *runner) baseline(ctx context.Context, tg *teamTarget, rep *Report) error {
	cfg := r.cfg
	r.say("load: %g req/s %s %s (Host %s); baseline for %s", cfg.Rate, cfg.Method, cfg.URL, cfg.Host, baseline)
	end := tg.start.Add(baseline)
	if err := r.waitUntil(ctx, end); err != nil {
		return err
	}
	if err := r.baselineTo(ctx, tg, rep, end); err != nil {
		return err
	}
	b := *rep.Baseline
	if b.OK > 0 {
		return nil
	}
	if upstreamDown(b) {
		// The ingress took the request and found no pod answering: the
		// flags reach the route; the Deployment does not serve yet.
		return usage("no 2xx response from --%s %s with --%s %q in %s (%s): the ingress routes there but no pod of deployment/%s answered; is it listening on its Service's targetPort yet? (kubectl -n %s get endpointslices,pods)",
			FlagURL, cfg.URL, FlagHost, cfg.Host, baseline, b, cfg.Deployment, cfg.Namespace)
	}
	hint := ""
	if cfg.URL.Scheme == "https" {
		hint = fmt.Sprintf("; for https, is the ingress's certificate for --%s trusted? (--%s FILE, or --%s)", FlagHost, FlagIngressCA, FlagIngressInsecure)
	}
	return usage("no 2xx response from --%s %s with --%s %q in %s (%s): check --%s, --%s and --%s%s", FlagURL, cfg.URL, FlagHost, cfg.Host, baseline, b, FlagURL, FlagHost, FlagPath, hint)
}

// extendBaseline moves the baseline's end to now (the first rollout's
// start): failures of the team's route during the self-test are before any
// rollout.
func (r *runner) extendBaseline(ctx context.Context, tg *teamTarget, rep *Report) error {
	end := r.clk.Now()
	if !end.After(tg.from) {
		return nil
	}
	return r.baselineTo(ctx, tg, rep, end)
}

// baselineTo records the load's outcomes from its start to end as the
// baseline; the first rollout's failures start at end.
func (r *runner) baselineTo(ctx context.Context, tg *teamTarget, rep *Report, end time.Time) error {
	if err := tg.gen.Settle(ctx, end); err != nil {
		return err
	}
	b := outcomesOf(tg.gen.FailureEvents(tg.start, end))
	b.OK = tg.gen.Totals().OK
	rep.Baseline = &b
	tg.from = end
	return nil
}

// verify runs the rollouts of the team's Deployment under its load. A
// rollout that does not complete (its timeout, or the Deployment's
// progress deadline) ends the run: restarting a Deployment that cannot
// roll only stacks more rollouts on it.
func (r *runner) verify(ctx context.Context, tg *teamTarget, rep *Report) error {
	cfg := r.cfg
	for n := 1; n <= cfg.Rollouts; n++ {
		started := false
		ro, err := r.rollout(ctx, tg.target, n, func() { started = true })
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
		if !ro.Complete {
			if n < cfg.Rollouts {
				rep.Notes = append(rep.Notes, fmt.Sprintf("rollout %d did not complete, so no further rollout was %s", n, map[bool]string{true: "waited for", false: "started"}[cfg.Watch]))
			}
			break
		}
	}
	return nil
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
