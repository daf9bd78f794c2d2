// Command benchclusterip prints what the load generator (`epwindow load`, a
// new connection per request, read through its /stats) achieves on the
// local cluster (kube-proxy in nftables mode, Skipper), on this machine:
//
//   - through a Service's ClusterIP from one runner pod, next to its rate on
//     loopback against the same probe binary (goal ≥ 2,000 req/s);
//   - through the local Skipper with the probes behind it, next to vegeta
//     at the same rates and Host, a new connection per request too: the
//     highest of -skipper-rates each sustains (≥ 99% answered 2xx at ≥ 95%
//     of the rate asked; goal ≥ 2,000 req/s).
//
// Needs bin/epwindow-local (make cluster), bin/epwindow, root, and vegeta
// (-vegeta; hack/bench-load.sh installs it into .cache/bin). make bench
// runs it.
//
//	go run ./hack/benchclusterip [-rate 2500] [-duration 10s]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/epwindow/epwindow/internal/localcluster"
	"github.com/epwindow/epwindow/measure/load"
)

// goal is the issues' target through the ClusterIP and through Skipper on
// 2 cores.
const goal = 2000.0

var (
	vegeta        string
	skipperRates  = rates{1500, 2000, 2500}
	skipperRounds = 3
	skipperDur    = 5 * time.Second
)

// rates is a comma-separated list of rates.
type rates []float64

func (r *rates) String() string { return fmt.Sprint(*r) }
func (r *rates) Set(v string) error {
	*r = nil
	for _, f := range strings.Split(v, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || x <= 0 {
			return fmt.Errorf("rate %q", f)
		}
		*r = append(*r, x)
	}
	return nil
}

func main() {
	rate := flag.Float64("rate", 2500, "requests per second asked of the runner")
	dur := flag.Duration("duration", 10*time.Second, "measured span (after a 2 s warm-up)")
	flag.StringVar(&vegeta, "vegeta", ".cache/bin/vegeta", "the vegeta binary to compare with through Skipper")
	flag.Var(&skipperRates, "skipper-rates", "rates to try through Skipper, comma-separated")
	flag.IntVar(&skipperRounds, "skipper-rounds", skipperRounds, "rounds of each tool at each rate through Skipper")
	flag.DurationVar(&skipperDur, "skipper-duration", skipperDur, "measured span of one round through Skipper")
	flag.Parse()
	if err := run(*rate, *dur); err != nil {
		fmt.Fprintln(os.Stderr, "benchclusterip:", err)
		os.Exit(1)
	}
}

func run(rate float64, dur time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := localcluster.BinDir()
	if err != nil {
		return err
	}
	loop, err := loopback(ctx, filepath.Join(bin, "epwindow"), rate, dur)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	c, err := localcluster.Start(ctx, localcluster.Options{Nodes: 2})
	if err != nil {
		return err
	}
	defer c.Stop()
	cip, err := clusterIP(ctx, c.Client, rate, dur)
	if err != nil {
		return fmt.Errorf("ClusterIP: %w", err)
	}
	sk, err := throughSkipper(ctx, filepath.Join(bin, "epwindow"), c.IngressURL)
	if err != nil {
		return fmt.Errorf("Skipper: %w", err)
	}
	fmt.Printf("\n== epwindow load, %g req/s asked, a new connection per request, %s measured ==\n", rate, dur)
	row := func(name string, m measured) {
		fmt.Printf("%-44s %8.0f req/s ok  (%d ok, %d failed, %d dropped)\n", name, m.rate, m.ok, m.failed, m.dropped)
	}
	row("loopback (runner and probe on 127.0.0.1)", loop)
	row("ClusterIP (runner pod -> kube-proxy -> 2 probes)", cip)
	verdict := "met"
	if cip.rate < goal {
		verdict = "NOT met"
	}
	fmt.Printf("ratio ClusterIP/loopback %.2f×; goal ≥ %.0f req/s through the ClusterIP: %s\n", cip.rate/loop.rate, goal, verdict)

	fmt.Printf("\n== through the local Skipper (Host %s, 2 probes behind it), a new connection per request: median of %d rounds of %s, the tools alternating ==\n",
		benchHost, skipperRounds, skipperDur)
	fmt.Printf("%-10s %22s %22s %10s\n", "asked", "epwindow load (2xx/s)", "vegeta (2xx/s)", "ratio")
	for _, t := range sk.rates {
		fmt.Printf("%-10g %14.0f (%5.1f%%) %14.0f (%5.1f%%) %9.2f×\n", t.asked, t.epwindow, 100*t.epwindowOK, t.vegeta, 100*t.vegetaOK, t.epwindow/t.vegeta)
	}
	verdict = "met"
	if sk.best < goal {
		verdict = "NOT met"
	}
	fmt.Printf("highest rate sustained (≥ 99%% 2xx at ≥ 95%% of the rate asked): epwindow load %.0f req/s (goal ≥ %.0f: %s), vegeta %.0f req/s\n",
		sk.best, goal, verdict, sk.vegetaBest)
	return nil
}

const benchHost = "bench.local"

// skipperResult is the Skipper sweep.
type skipperResult struct {
	rates            []rateResult
	best, vegetaBest float64 // highest sustained rate asked, 0 if none
}

// rateResult is both tools at one rate: median 2xx per second over the
// rounds, and the median share of 2xx.
type rateResult struct {
	asked                                  float64
	epwindow, epwindowOK, vegeta, vegetaOK float64
}

// throughSkipper runs epwindow load and vegeta on this machine through
// Skipper, alternating, skipperRounds rounds a rate: one short round of
// each is at the mercy of whatever else the two cores did then.
func throughSkipper(ctx context.Context, epwindow, ingress string) (*skipperResult, error) {
	if _, err := os.Stat(vegeta); err != nil {
		return nil, fmt.Errorf("no vegeta at %s (hack/bench-load.sh installs it)", vegeta)
	}
	res := &skipperResult{}
	for _, r := range skipperRates {
		var ep, epOK, vg, vgOK []float64
		for round := range skipperRounds {
			runEp := func() error {
				m, err := loadRun(ctx, epwindow, ingress+"/", benchHost, r, skipperDur)
				if err == nil {
					ep, epOK = append(ep, m.rate), append(epOK, m.okShare())
				}
				return err
			}
			runVg := func() error {
				v, err := runVegeta(ctx, ingress+"/", benchHost, r, skipperDur)
				if err == nil {
					vg, vgOK = append(vg, v.Throughput), append(vgOK, v.Success)
				}
				return err
			}
			first, second := runEp, runVg
			if round%2 == 1 {
				first, second = runVg, runEp
			}
			if err := first(); err != nil {
				return nil, err
			}
			if err := second(); err != nil {
				return nil, err
			}
		}
		t := rateResult{asked: r, epwindow: median(ep), epwindowOK: median(epOK), vegeta: median(vg), vegetaOK: median(vgOK)}
		res.rates = append(res.rates, t)
		if t.epwindow >= 0.95*r && t.epwindowOK >= 0.99 {
			res.best = r
		}
		if t.vegeta >= 0.95*r && t.vegetaOK >= 0.99 {
			res.vegetaBest = r
		}
	}
	return res, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// okShare is the share of sent requests answered 2xx.
func (m measured) okShare() float64 {
	sent := m.ok + m.failed + m.dropped
	if sent == 0 {
		return 0
	}
	return float64(m.ok) / float64(sent)
}

// vegetaReport is the part of `vegeta report -type=json` read here.
type vegetaReport struct {
	Rate       float64 `json:"rate"`
	Throughput float64 `json:"throughput"`
	Success    float64 `json:"success"`
}

// runVegeta runs vegeta (throughSkipper checked it is there) at rate.
func runVegeta(ctx context.Context, url, host string, rate float64, dur time.Duration) (*vegetaReport, error) {
	attack := exec.CommandContext(ctx, vegeta, "attack", fmt.Sprintf("-rate=%g/s", rate), "-duration="+dur.String(),
		"-keepalive=false", "-header", "Host: "+host, "-max-workers=4096")
	attack.Stdin = strings.NewReader("GET " + url + "\n")
	report := exec.CommandContext(ctx, vegeta, "report", "-type=json")
	pipe, err := attack.StdoutPipe()
	if err != nil {
		return nil, err
	}
	report.Stdin = pipe
	if err := attack.Start(); err != nil {
		return nil, err
	}
	out, err := report.Output()
	if werr := attack.Wait(); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return nil, fmt.Errorf("vegeta: %w", err)
	}
	var v vegetaReport
	return &v, json.Unmarshal(out, &v)
}

// measured is what two /stats readings dur apart say.
type measured struct {
	rate                float64
	ok, failed, dropped int64
}

// measure reads stats twice, dur apart after a 2 s warm-up, on the
// runner's own clock.
func measure(ctx context.Context, read func() (*load.Stats, error), dur time.Duration) (measured, error) {
	time.Sleep(2 * time.Second)
	a, err := read()
	if err != nil {
		return measured{}, err
	}
	time.Sleep(dur)
	b, err := read()
	if err != nil {
		return measured{}, err
	}
	span := b.Now.Sub(a.Now).Seconds()
	return measured{rate: float64(b.OK-a.OK) / span, ok: b.OK - a.OK, failed: b.Failed - a.Failed, dropped: b.Dropped - a.Dropped}, ctx.Err()
}

func loopback(ctx context.Context, epwindow string, rate float64, dur time.Duration) (measured, error) {
	ports, err := freePorts(1)
	if err != nil {
		return measured{}, err
	}
	probe := exec.CommandContext(ctx, epwindow, "probe", "--listen", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--pod-name", "bench", "--termination-log", "")
	if err := probe.Start(); err != nil {
		return measured{}, err
	}
	defer func() { _ = probe.Process.Kill(); _ = probe.Wait() }()
	return loadRun(ctx, epwindow, fmt.Sprintf("http://127.0.0.1:%d/", ports[0]), "", rate, dur)
}

// loadRun runs epwindow load on this machine against url and measures it.
func loadRun(ctx context.Context, epwindow, url, host string, rate float64, dur time.Duration) (measured, error) {
	ports, err := freePorts(1)
	if err != nil {
		return measured{}, err
	}
	args := []string{"load", "--url", url, "--rate", fmt.Sprint(rate),
		"--deadline", (dur + time.Minute).String(), "--stats-listen", fmt.Sprintf("127.0.0.1:%d", ports[0])}
	if host != "" {
		args = append(args, "--host", host)
	}
	runner := exec.CommandContext(ctx, epwindow, args...)
	if err := runner.Start(); err != nil {
		return measured{}, err
	}
	defer func() { _ = runner.Process.Kill(); _ = runner.Wait() }()
	stats := fmt.Sprintf("http://127.0.0.1:%d/stats", ports[0])
	read := func() (*load.Stats, error) {
		resp, err := http.Get(stats)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var s load.Stats
		return &s, json.NewDecoder(resp.Body).Decode(&s)
	}
	if err := retry(ctx, func() error { _, err := read(); return err }); err != nil {
		return measured{}, err
	}
	return measure(ctx, read, dur)
}

func clusterIP(ctx context.Context, cs kubernetes.Interface, rate float64, dur time.Duration) (measured, error) {
	ns := "epwindow-bench"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return measured{}, err
	}
	labels := map[string]string{"app": "bench"}
	replicas := int32(2)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "probe", Image: "epwindow:local", Command: []string{"epwindow", "probe", "--listen=:8080", "--termination-log="},
				Env:   []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
			}}}}},
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: corev1.ServiceSpec{Selector: labels,
		Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}}}
	var err error
	if err := retry(ctx, func() error {
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
		return err
	}); err != nil {
		return measured{}, err
	}
	if svc, err = cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return measured{}, err
	}
	// The same probes behind Skipper, for throughSkipper (class-less: the
	// local Skipper serves those too).
	prefix := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
		Host: benchHost, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
			Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
				Name: "probe", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}}}}
	if _, err := cs.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		return measured{}, err
	}
	if err := retry(ctx, func() error {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "probe", metav1.GetOptions{})
		if err == nil && d.Status.ReadyReplicas < replicas {
			err = fmt.Errorf("%d of %d probes ready", d.Status.ReadyReplicas, replicas)
		}
		return err
	}); err != nil {
		return measured{}, err
	}
	runner := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "runner"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "load", Image: "epwindow:local", Command: []string{"epwindow", "load", "--url", "http://" + svc.Spec.ClusterIP + "/",
			"--rate", fmt.Sprint(rate), "--deadline", (dur + time.Minute).String(), "--stats-listen", ":9090"},
	}}}}
	if err := retry(ctx, func() error { _, err := cs.CoreV1().Pods(ns).Create(ctx, runner, metav1.CreateOptions{}); return err }); err != nil {
		return measured{}, err
	}
	read := func() (*load.Stats, error) {
		b, err := cs.CoreV1().Pods(ns).ProxyGet("http", "runner", "9090", "/stats", nil).DoRaw(ctx)
		if err != nil {
			return nil, err
		}
		var s load.Stats
		return &s, json.Unmarshal(b, &s)
	}
	if err := retry(ctx, func() error { _, err := read(); return err }); err != nil {
		return measured{}, err
	}
	return measure(ctx, read, dur)
}

// retry calls f every 200 ms until it succeeds, for at most a minute.
func retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
