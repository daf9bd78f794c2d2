package monitor

import (
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"
)

const rulesDir = "../deploy/monitoring"

// The rule file loads in Prometheus' own checker, and its alerts fire on
// the series the collector exports exactly when they should (promtool test
// rules evaluates them with the server's rule engine:
// deploy/monitoring/rules_test.yaml). promtool comes with Debian's
// prometheus package, which make deps installs.
func TestRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not on PATH (Debian's prometheus package; make deps installs it): %v", err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = rulesDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// The PrometheusRule carries the rule file's groups, unchanged.
func TestPrometheusRuleMatchesRules(t *testing.T) {
	var file struct {
		Groups []any `json:"groups"`
	}
	var crd struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	for path, v := range map[string]any{rulesDir + "/rules.yaml": &file, rulesDir + "/prometheusrule.yaml": &crd} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(data, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if crd.Kind != "PrometheusRule" || len(file.Groups) == 0 || !reflect.DeepEqual(file.Groups, crd.Spec.Groups) {
		t.Errorf("prometheusrule.yaml's groups differ from rules.yaml's:\n%v\n%v", crd.Spec.Groups, file.Groups)
	}
}

// Every metric the rules read is one the collector exports.
func TestRulesReadExportedMetrics(t *testing.T) {
	data, err := os.ReadFile(rulesDir + "/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 64)
	NewCollector(Options{}).Describe(ch)
	close(ch)
	exported := map[string]bool{}
	name := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		exported[name.FindStringSubmatch(d.String())[1]] = true
	}
	used := regexp.MustCompile(`epwindow_[a-z_]+`).FindAllString(string(data), -1)
	if len(used) == 0 {
		t.Fatal("the rules read no epwindow metric")
	}
	for _, m := range used {
		if !exported[m] {
			t.Errorf("rules.yaml reads %s, which the collector does not export", m)
		}
	}
}
