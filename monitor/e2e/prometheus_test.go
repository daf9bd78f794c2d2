// Package e2e runs the monitoring path with real parts: the in-cluster
// schedule (epwindow manifests --schedule) on the local cluster, its history
// served by `epwindow history --serve` and scraped by a real Prometheus
// server (Debian's prometheus package, which make deps installs) that loads
// deploy/monitoring/rules.yaml.
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
)

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
