package main

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure"
)

// runApp runs the CLI with args and returns its stdout and error.
func runApp(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := newApp("epwindow")
	app.Writer, app.ErrWriter = &out, &errOut
	// cli.Exit errors would end the test binary through os.Exit.
	app.ExitErrHandler = func(*cli.Context, error) {}
	err := runCLI(context.Background(), app, append([]string{"epwindow"}, args...))
	return out.String(), err
}

func renderYAML(t *testing.T, p deploy.Params) string {
	t.Helper()
	wl, err := deploy.Render(p)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	var buf bytes.Buffer
	if err := deploy.WriteYAML(&buf, wl); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestManifestsEqualsRender: `epwindow manifests` prints exactly what
// deploy.Render gives for the same values — the objects measure applies.
func TestManifestsEqualsRender(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want deploy.Params
	}{
		{"defaults", nil, deploy.Params{
			Namespace: defaultNamespace, Name: defaultName, Replicas: defaultReplicas, Host: defaultHost,
			Image: deploy.DefaultImage, Hold: defaultHold, GraceMargin: defaultGraceMargin, PreStop: true,
		}},
		{"every flag", []string{
			"--namespace", "ns1", "--name", "web", "--replicas", "5", "--ingress-class", "nginx-internal",
			"--overlay", "nginx", "--host", "probe.example.com", "--image", "registry.example.com/epwindow:v1",
			"--hold", "45s", "--grace-margin", "10s", "--prestop-sleep", "8s", "--probe-clock-offset", "2s",
			"--label", "team=platform", "--label", "cost-center=42",
		}, deploy.Params{
			Namespace: "ns1", Name: "web", Replicas: 5, IngressClass: "nginx-internal", Overlay: "nginx",
			Host: "probe.example.com", Image: "registry.example.com/epwindow:v1", Hold: 45 * time.Second,
			GraceMargin: 10 * time.Second, PreStop: true, PreStopSleep: 8 * time.Second, ClockOffset: 2 * time.Second,
			Labels: map[string]string{"team": "platform", "cost-center": "42"},
		}},
		{"broken canary on alb", []string{"--ingress-class", "alb", "--prestop=false", "--exit-on-sigterm"}, deploy.Params{
			Namespace: defaultNamespace, Name: defaultName, Replicas: defaultReplicas, IngressClass: "alb", Host: defaultHost,
			Image: deploy.DefaultImage, Hold: defaultHold, GraceMargin: defaultGraceMargin, ExitOnSigterm: true,
		}},
		{"httproute", []string{"--route", "httproute", "--gateway", "gw/traefik", "--gateway-section", "web", "--host", "probe.example.com"}, deploy.Params{
			Namespace: defaultNamespace, Name: defaultName, Replicas: defaultReplicas, Host: "probe.example.com",
			Image: deploy.DefaultImage, Hold: defaultHold, GraceMargin: defaultGraceMargin, PreStop: true,
			Route: deploy.RouteHTTPRoute, Gateway: deploy.GatewayRef{Namespace: "gw", Name: "traefik", Section: "web"},
		}},
		{"startup race", []string{"--readiness=false", "--listen-delay", "3s"}, deploy.Params{
			Namespace: defaultNamespace, Name: defaultName, Replicas: defaultReplicas, Host: defaultHost,
			Image: deploy.DefaultImage, Hold: defaultHold, GraceMargin: defaultGraceMargin, PreStop: true,
			NoReadiness: true, ListenDelay: 3 * time.Second,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := runApp(t, append([]string{"manifests"}, tt.args...)...)
			if err != nil {
				t.Fatalf("manifests: %v", err)
			}
			if want := renderYAML(t, tt.want); got != want {
				t.Errorf("manifests printed\n%s\nwant (Render)\n%s", got, want)
			}
		})
	}
}

func TestManifestsRBAC(t *testing.T) {
	for _, v := range rbacVariants {
		got, err := runApp(t, "manifests", "--rbac", v)
		if err != nil {
			t.Fatalf("--rbac %s: %v", v, err)
		}
		want, err := deploy.Kustomize("rbac/" + v)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("--rbac %s printed\n%s\nwant\n%s", v, got, want)
		}
	}
}

// --rbac target --namespace NS puts the Role in the team's namespace.
func TestManifestsRBACTargetNamespace(t *testing.T) {
	got, err := runApp(t, "manifests", "--rbac", "target", "--namespace", "team-b")
	if err != nil {
		t.Fatal(err)
	}
	want, err := deploy.KustomizeIn("rbac/target", "team-b")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("--rbac target --namespace team-b printed\n%s\nwant\n%s", got, want)
	}
	if !slices.Contains(rbacVariants, "target") {
		t.Errorf("rbacVariants = %q, want target among them", rbacVariants)
	}
}

// wantBadInput runs manifests with args and wants exit code 2 with an
// error naming want, and nothing printed.
func wantBadInput(t *testing.T, args []string, want string) {
	t.Helper()
	out, err := runApp(t, append([]string{"manifests"}, args...)...)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want one naming %q", err, want)
	}
	if ec, ok := err.(cli.ExitCoder); !ok || ec.ExitCode() != 2 {
		t.Errorf("err = %#v, want exit code 2 (bad input)", err)
	}
	if out != "" {
		t.Errorf("printed %q on bad input", out)
	}
}

func TestManifestsBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--replicas", "0"}, "--replicas"},
		{[]string{"--hold", "-1s"}, "--hold"},
		{[]string{"--grace-margin", "0s"}, "--grace-margin"},
		{[]string{"--prestop=false", "--prestop-sleep", "5s"}, "--prestop"},
		{[]string{"--overlay", "istio"}, "--overlay"},
		{[]string{"--label", "novalue"}, "--label"},
		{[]string{"--rbac", "admin"}, "--rbac"},
		{[]string{"--image", ""}, "--image"},
		{[]string{"--listen-delay", "-1s"}, "--listen-delay"},
		{[]string{"extra"}, "no arguments"},
		{[]string{"--route", "ingres"}, "--route"},
		{[]string{"--route", "httproute"}, "--gateway NAMESPACE/NAME is required"},
		{[]string{"--route", "httproute", "--gateway", "traefik"}, "--gateway"},
		{[]string{"--gateway", "gw/traefik"}, "--gateway gw/traefik applies to --route httproute only"},
		{[]string{"--route", "httproute", "--gateway", "gw/traefik", "--ingress-class", "alb"}, "--ingress-class"},
		{[]string{"--route", "httproute", "--gateway", "gw/traefik", "--overlay", "nginx"}, "--overlay"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) { wantBadInput(t, tt.args, tt.want) })
	}
}

// TestWorkloadFlagsMatchMeasure: every workload flag manifests takes has the
// same name, type and default in measure, so that manifests prints what
// measure applies when given the same flags.
func TestWorkloadFlagsMatchMeasure(t *testing.T) {
	measureFlags := map[string]cli.Flag{}
	for _, f := range measureCommand().Flags {
		for _, n := range f.Names() {
			measureFlags[n] = f
		}
	}
	manifestsOnly := map[string]bool{flagOverlay: true, flagLabel: true}
	for _, f := range workloadFlags() {
		n := f.Names()[0]
		mf, ok := measureFlags[n]
		if !ok {
			if !manifestsOnly[n] {
				t.Errorf("measure has no --%s", n)
			}
			continue
		}
		if reflect.TypeOf(mf) != reflect.TypeOf(f) {
			t.Errorf("--%s is %T in measure, %T in manifests", n, mf, f)
			continue
		}
		// Every basic urfave/cli flag keeps its default in the Value field.
		got := reflect.ValueOf(f).Elem().FieldByName("Value").Interface()
		want := reflect.ValueOf(mf).Elem().FieldByName("Value").Interface()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("--%s defaults to %v in manifests, %v in measure", n, got, want)
		}
	}
}

// manifests --route httproute prints the HTTPRoute in place of the Ingress:
// on the Gateway, for the host, to the probe Service.
func TestManifestsHTTPRoute(t *testing.T) {
	out, err := runApp(t, "manifests", "--route", "httproute", "--gateway", "gw/traefik", "--host", "probe.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "kind: Ingress") {
		t.Errorf("printed an Ingress:\n%s", out)
	}
	docs := strings.Split(out, "\n---\n")
	route := docs[len(docs)-1]
	for _, s := range []string{"apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute", "name: probe\n  namespace: epwindow",
		"parentRefs:\n  - group: gateway.networking.k8s.io\n    kind: Gateway\n    name: traefik\n    namespace: gw",
		"hostnames:\n  - probe.example.com", "type: PathPrefix\n        value: /", "backendRefs:\n    - name: probe\n      port: 8080"} {
		if !strings.Contains(route, s) {
			t.Errorf("HTTPRoute document lacks %q:\n%s", s, route)
		}
	}
}

// scheduleCommand returns the command line of the CronJob's container in
// manifests' output.
func scheduleCommand(t *testing.T, out string) []string {
	t.Helper()
	docs := strings.Split(out, "\n---\n")
	var cj batchv1.CronJob
	if err := yaml.UnmarshalStrict([]byte(docs[len(docs)-1]), &cj); err != nil {
		t.Fatalf("last document is no CronJob: %v\n%s", err, out)
	}
	return cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Command
}

// TestManifestsSchedule: --schedule prints deploy.RenderSchedule for the
// flags, in place of the probe workload, with measure's command line built
// from the run flags, the workload flags given and measure's flags after --.
func TestManifestsSchedule(t *testing.T) {
	out, err := runApp(t, "manifests", "--schedule", "@every 6h", "--namespace", "team-a", "--trials", "12",
		"--image", "registry.example.com/epwindow:v1", "--history-size", "5Gi", "--storage-class", "fast",
		"--keep-runs", "100", "--keep-for", "720h", "--ingress-class", "nginx", "--hold", "30s", "--label", "team=platform",
		"--", "--url", "http://ingress-nginx-controller.ingress-nginx", "--observer", "none")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--trials=12", "--keep-runs=100", "--keep-for=720h0m0s",
		"--ingress-class=nginx", "--image=registry.example.com/epwindow:v1", "--hold=30s", "--label=team=platform",
		"--url", "http://ingress-nginx-controller.ingress-nginx", "--observer", "none"}
	s, err := deploy.RenderSchedule(deploy.ScheduleParams{
		Namespace: "team-a", Schedule: "@every 6h", Image: "registry.example.com/epwindow:v1",
		HistorySize: resource.MustParse("5Gi"), StorageClass: "fast", Args: args, Labels: map[string]string{"team": "platform"},
		MetricsRefresh: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := deploy.WriteYAML(&want, s); err != nil {
		t.Fatal(err)
	}
	if out != want.String() {
		t.Errorf("manifests --schedule printed\n%s\nwant (RenderSchedule)\n%s", out, want.String())
	}
	for _, notThere := range []string{"kind: Service\n", "kind: Ingress", "name: " + defaultName + "\n"} {
		if strings.Contains(out, notThere) {
			t.Errorf("--schedule printed the probe workload (%q)", notThere)
		}
	}
	if strings.Count(out, "kind: Deployment") != 1 || !strings.Contains(out, "name: "+deploy.HistoryServerName) {
		t.Errorf("--schedule printed Deployments other than the history's metrics server:\n%s", out)
	}
	cmd := scheduleCommand(t, out)
	// What the pod runs parses and validates as measure.
	if _, err := checkMeasureArgs(cmd[2:]); err != nil {
		t.Errorf("the CronJob's measure command does not parse: %v", err)
	}

	// Defaults: 10 trials, 500 runs, 90 days.
	out, err = runApp(t, "manifests", "--schedule", "@hourly", "--", "--url", "http://ingress.example")
	if err != nil {
		t.Fatal(err)
	}
	wantCmd := []string{"epwindow", "measure", "--namespace=epwindow", "--history=" + deploy.HistoryMountPath,
		"--trials=10", "--keep-runs=500", "--keep-for=2160h0m0s", "--url", "http://ingress.example"}
	if got := scheduleCommand(t, out); !reflect.DeepEqual(got, wantCmd) {
		t.Errorf("default command %q, want %q", got, wantCmd)
	}
	if !strings.Contains(out, "storage: 1Gi") {
		t.Error("the default history volume is not 1Gi")
	}

	// The metrics server gets the documented preStop and the refresh.
	out, err = runApp(t, "manifests", "--schedule", "@hourly", "--documented-prestop", "5s", "--metrics-refresh", "10s", "--", "--url", "http://ingress.example")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"- --documented-prestop=5s", "- --refresh=10s", "- --serve=:9090"} {
		if !strings.Contains(out, want) {
			t.Errorf("the history server's command lacks %q:\n%s", want, out)
		}
	}
	// The drift test's sizes reach it only when given: history's defaults
	// otherwise.
	if strings.Contains(out, "-trials=") && strings.Contains(out, "--baseline-trials") {
		t.Errorf("the history server got a baseline size not given:\n%s", out)
	}
	out, err = runApp(t, "manifests", "--schedule", "@hourly", "--baseline-trials", "40", "--window-trials", "20", "--", "--url", "http://ingress.example")
	if err != nil {
		t.Fatal(err)
	}
	// Both the metrics server and measure's retention (which keeps the
	// runs the drift test rests on) get them.
	for _, want := range []string{"- --baseline-trials=40", "- --window-trials=20"} {
		if n := strings.Count(out, want); n != 2 {
			t.Errorf("%q in %d commands, want the history server's and measure's:\n%s", want, n, out)
		}
	}
}

// TestManifestsScheduleWorkloadFlags: every workload flag given reaches
// measure in the CronJob, as a flag measure parses to the same value.
func TestManifestsScheduleWorkloadFlags(t *testing.T) {
	args := []string{"--replicas", "5", "--route", "httproute", "--gateway", "gw/traefik", "--gateway-section", "web",
		"--host", "probe.example.com", "--image", "registry.example.com/epwindow:v2", "--hold", "45s", "--grace-margin", "12s",
		"--prestop-sleep", "5s", "--exit-on-sigterm", "--readiness=false", "--listen-delay", "2s",
		"--probe-clock-offset", "1s", "--label", "a=b", "--label", "c=d"}
	out, err := runApp(t, append(append([]string{"manifests", "--schedule", "@daily"}, args...), "--", "--url", "http://gw.example")...)
	if err != nil {
		t.Fatal(err)
	}
	cmd := scheduleCommand(t, out)
	seen := map[string]bool{}
	for _, a := range cmd {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		seen[name] = true
	}
	for _, f := range workloadFlags() {
		n := f.Names()[0]
		if n == flagOverlay || n == measure.FlagIngressClass || n == measure.FlagPreStop {
			continue // not given: --route httproute refuses them, --prestop is the default
		}
		if !seen[n] {
			t.Errorf("--%s given but not passed on to measure: %q", n, cmd)
		}
	}
	cfg, err := parseMeasure(t, cmd[2:]...)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Replicas != 5 || cfg.Hold != 45*time.Second || cfg.PreStopSleep != 5*time.Second || !cfg.ExitOnSigterm ||
		!cfg.NoReadiness || cfg.Gateway.Section != "web" || cfg.Labels["c"] != "d" || cfg.Namespace != "epwindow" {
		t.Errorf("measure reads the CronJob's command as %+v", cfg)
	}
}

func TestManifestsScheduleBadInput(t *testing.T) {
	url := []string{"--", "--url", "http://ingress.example"}
	tests := []struct {
		args []string
		want string
	}{
		{append([]string{"--schedule", "every 6h"}, url...), "--schedule"},
		{append([]string{"--schedule", ""}, url...), "--schedule"},
		{append([]string{"--schedule", "61 * * * *"}, url...), "--schedule"},
		{append([]string{"--schedule", "CRON_TZ=UTC 0 * * * *"}, url...), "--schedule"},
		{append([]string{"--schedule", "@every 6h", "--history-size", "lots"}, url...), "--history-size"},
		{append([]string{"--schedule", "@every 6h", "--history-size", "0"}, url...), "--history-size"},
		{append([]string{"--schedule", "@every 6h", "--storage-class", "Fast SSD"}, url...), "--storage-class"},
		{append([]string{"--schedule", "@every 6h", "--keep-runs", "-1"}, url...), "--keep-runs"},
		{append([]string{"--schedule", "@every 6h", "--keep-for", "-24h"}, url...), "--keep-for"},
		{append([]string{"--schedule", "@every 6h", "--trials", "0"}, url...), "--trials"},
		{append([]string{"--schedule", "@every 6h", "--replicas", "0"}, url...), "--replicas"},
		{append([]string{"--schedule", "@every 6h", "--namespace", "Team_A"}, url...), "--namespace"},
		{append([]string{"--schedule", "@every 6h", "--name", "web"}, url...), "--name"},
		{append([]string{"--schedule", "@every 6h", "--rbac", "cluster"}, url...), "--rbac"},
		{[]string{"--schedule", "@every 6h"}, "--url"},
		{append([]string{"--schedule", "@every 6h"}, append(url, "--no-such-flag")...), "no-such-flag"},
		{append([]string{"--schedule", "@every 6h"}, append(url, "--rate", "-1")...), "--rate"},
		{append([]string{"--schedule", "@every 6h"}, append(url, "--trials", "3")...), "--trials"},
		{append([]string{"--schedule", "@every 6h"}, append(url, "--out=x.jsonl")...), "--out"},
		{append([]string{"--schedule", "@every 6h"}, append(url, "--history", "/tmp")...), "--history"},
		{append([]string{"--schedule", "@every 6h"}, append(url, "--kubeconfig", "/k")...), "--kubeconfig"},
		{append([]string{"--schedule", "@every 6h"}, append(url, "-n", "other")...), "-n"},
		{append([]string{"--schedule", "@every 6h"}, append(url, "--hold", "10s")...), "--hold"},
		{[]string{"--trials", "10"}, "--trials needs --schedule"},
		{[]string{"--keep-runs", "10"}, "--keep-runs needs --schedule"},
		{[]string{"--history-size", "1Gi"}, "--history-size needs --schedule"},
		{[]string{"--documented-prestop", "5s"}, "--documented-prestop needs --schedule"},
		{[]string{"--metrics-refresh", "5s"}, "--metrics-refresh needs --schedule"},
		{append([]string{"--schedule", "@every 6h", "--documented-prestop", "-5s"}, url...), "--documented-prestop"},
		{append([]string{"--schedule", "@every 6h", "--metrics-refresh", "0s"}, url...), "--metrics-refresh"},
		{append([]string{"--schedule", "@every 6h", "--baseline-trials", "0"}, url...), "--baseline-trials"},
		{append([]string{"--schedule", "@every 6h", "--window-trials", "-3"}, url...), "--window-trials"},
		{[]string{"--baseline-trials", "20"}, "--baseline-trials needs --schedule"},
		{[]string{"--window-trials", "20"}, "--window-trials needs --schedule"},
		{[]string{"--", "--url", "http://x"}, "no arguments"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) { wantBadInput(t, tt.args, tt.want) })
	}
}

// TestObserverWarning: a scheduled run whose observer port-forwards to the
// controller's pods is warned about; one that reads a URL, or none, is not.
func TestObserverWarning(t *testing.T) {
	tests := []struct {
		args []string
		warn bool
	}{
		{[]string{"--observer", "none"}, false},
		{[]string{"--observer", "skipper", "--observer-url", "http://skipper.kube-system:9911/routes"}, false},
		{[]string{"--observer", "nginx"}, true},
		{nil, true}, // auto
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cfg, err := checkMeasureArgs(append([]string{"--url", "http://ingress.example", "--namespace", "team-a"}, tt.args...))
			if err != nil {
				t.Fatal(err)
			}
			w := observerWarning(cfg)
			if (w != "") != tt.warn {
				t.Fatalf("warning %q, want one: %v", w, tt.warn)
			}
			if tt.warn && (!strings.Contains(w, "--observer-url") || !strings.Contains(w, "team-a/"+deploy.ScheduleName)) {
				t.Errorf("warning %q does not name --observer-url and the ServiceAccount", w)
			}
		})
	}
}
