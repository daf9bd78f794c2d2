// Package e2e runs the monitoring path with real parts: `epwindow history
// --serve` scraped by a real Prometheus server (Debian's prometheus package,
// which make deps installs) that loads deploy/monitoring/rules.yaml.
package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/epwindow/epwindow/internal/e2etest"
)

// history is a real run's results: 6 trials on the local cluster through
// Skipper, recorded with
//
//	bin/epwindow-local up --dir /tmp/lc
//	bin/epwindow measure --kubeconfig /tmp/lc/kubeconfig --url <ingress=> --ingress-class skipper \
//	    --observer skipper --observer-url <routes=> --trials 6 --quiet-period 2s --out run.jsonl
const history = "testdata/local-skipper.jsonl"

const rules = "../../deploy/monitoring/rules.yaml"

// freePort is a loopback port free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// start runs a command until the test ends; its output goes to the test
// log when the test fails.
func start(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "output"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		out.Close()
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("%s output:\n%s", filepath.Base(name), b)
		}
	})
}

// prometheus starts a Prometheus server that scrapes target every second
// and evaluates the rule file every second; it returns its API's base URL.
func prometheus(t *testing.T, target string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not on PATH (Debian's prometheus package; make deps installs it): %v", err)
	}
	ruleFile, err := filepath.Abs(rules)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: epwindow-history
    static_configs:
      - targets: [%q]
`, ruleFile, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	start(t, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	return "http://" + addr
}

// api GETs a Prometheus API path and decodes its data into v.
func api(base, path string, q url.Values, v any) error {
	resp, err := http.Get(base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Status != "success" {
		return fmt.Errorf("%s: %s %v", path, b, err)
	}
	return json.Unmarshal(env.Data, v)
}

type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
	Value  string            `json:"value"`
}

func alerts(base string) ([]alert, error) {
	var d struct {
		Alerts []alert `json:"alerts"`
	}
	err := api(base, "/api/v1/alerts", nil, &d)
	return d.Alerts, err
}

// scalar is the value of a PromQL query with one sample.
func scalar(base, query string) (float64, error) {
	var d struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := api(base, "/api/v1/query", url.Values{"query": {query}}, &d); err != nil {
		return 0, err
	}
	if len(d.Result) != 1 {
		return 0, fmt.Errorf("%s: %d samples", query, len(d.Result))
	}
	s, _ := d.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// The bound alert on real data, through a real Prometheus: with the
// documented preStop below the bound the history's newest run puts on the
// window, EpwindowWindowExceedsDocumentedPreStop fires once its `for: 1m`
// has passed, with the bound as its value; with it above, nothing fires
// although the same series are scraped. The drift alert stays silent: a
// 6-trial history has no baseline to judge against (not_judged).
//
// Both servers run side by side, so the test takes the rule's minute and
// the scrapes' seconds: about 70 s, mostly waiting.
func TestPrometheusAlertsOnTheHistory(t *testing.T) {
	bin := e2etest.Bin(t)
	dir := t.TempDir()
	data, err := os.ReadFile(history)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.jsonl"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "history", "--format", "json", dir).Output()
	if err != nil {
		t.Fatalf("epwindow history: %v", err)
	}
	var h struct {
		Latest struct {
			BoundNS int64 `json:"bound_ns"`
		} `json:"latest"`
	}
	if err := json.Unmarshal(out, &h); err != nil || h.Latest.BoundNS <= 0 {
		t.Fatalf("history json: %v %s", err, out)
	}
	bound := time.Duration(h.Latest.BoundNS)

	servers := map[string]string{}
	for name, documented := range map[string]time.Duration{"below": bound / 2, "above": 2 * bound} {
		target := "127.0.0.1:" + strconv.Itoa(freePort(t))
		start(t, bin, "history", "--serve", target, "--refresh", "1s", "--documented-prestop", documented.String(), dir)
		servers[name] = prometheus(t, target)
	}

	deadline := time.Now().Add(3 * time.Minute)
	var fired *alert
	for fired == nil {
		if time.Now().After(deadline) {
			as, err := alerts(servers["below"])
			t.Fatalf("no firing bound alert 3 min after the start (alerts %+v, %v)", as, err)
		}
		time.Sleep(2 * time.Second)
		as, err := alerts(servers["below"])
		if err != nil {
			continue // the server is starting
		}
		for i, a := range as {
			if a.Labels["alertname"] == "EpwindowWindowExceedsDocumentedPreStop" && a.State == "firing" {
				fired = &as[i]
			}
		}
	}
	if v, err := strconv.ParseFloat(fired.Value, 64); err != nil || time.Duration(v*1e9).Round(time.Millisecond) != bound.Round(time.Millisecond) {
		t.Errorf("the alert's value %s, want the history's bound %s", fired.Value, bound)
	}
	for name, base := range servers {
		// The series were scraped, so silence is the rule's verdict.
		if v, err := scalar(base, "epwindow_window_bound_seconds"); err != nil || time.Duration(v*1e9).Round(time.Millisecond) != bound.Round(time.Millisecond) {
			t.Errorf("%s: epwindow_window_bound_seconds = %v (%v), want %s", name, v, err, bound)
		}
		if v, err := scalar(base, `epwindow_drift_verdict{verdict="not_judged"}`); err != nil || v != 1 {
			t.Errorf("%s: not_judged = %v (%v), want 1", name, v, err)
		}
		as, err := alerts(base)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.Labels["alertname"] == "EpwindowWindowWorse" || name == "above" {
				t.Errorf("%s: alert %+v, want none", name, a)
			}
		}
	}
}
