package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/epwindow/epwindow/lint"
	"github.com/epwindow/epwindow/results"
)

var lintTestdata = filepath.Join("..", "..", "lint", "testdata")

func exitCode(err error) int {
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestLintExitCodes: 0 clean, 3 findings, 2 bad input (the YAML's file and
// line named), 2 for a missing or doubly given number.
func TestLintExitCodes(t *testing.T) {
	good := filepath.Join(lintTestdata, "rules", "good.yaml")
	bad := filepath.Join(lintTestdata, "rules", "EPW005.yaml")
	number := []string{"--prestop", "10s", "--drain", "20s", "--http-prestop", "/prestop=10s"}
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"clean", append(append([]string{"lint"}, number...), good), 0, ""},
		{"findings", append(append([]string{"lint"}, number...), bad), 3, ""},
		{"kustomize", append(append([]string{"lint"}, number...), filepath.Join(lintTestdata, "kustomize", "overlay")), 3, ""},
		{"no number", []string{"lint", good}, 2, "--from"},
		{"two numbers", []string{"lint", "--from", "x.jsonl", "--prestop", "1s", good}, 2, "--from and --prestop"},
		{"no input", append([]string{"lint"}, number...), 2, "--cluster"},
		{"bad yaml", append(append([]string{"lint"}, number...), filepath.Join(lintTestdata, "sarif-2.1.0-subset.json"), filepath.Join(lintTestdata, "..", "doc.go")), 2, "doc.go:"},
		{"unknown rule", append(append([]string{"lint", "--ignore", "EPW999"}, number...), good), 2, "--ignore"},
		{"bad format", append(append([]string{"lint", "--format", "xml"}, number...), good), 2, "--format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runApp(t, tt.args...)
			if got := exitCode(err); got != tt.code {
				t.Fatalf("exit %d (%v), want %d", got, err, tt.code)
			}
			if tt.msg != "" && !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not name %q", err, tt.msg)
			}
		})
	}
}

// TestLintFrom: --from takes the number the results package recommends
// for the run, and --drain overrides the run's drain the way report does.
func TestLintFrom(t *testing.T) {
	run := testdata("run.jsonl")
	file, err := readResults(run, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, drain := range []string{"", "30s"} {
		args := []string{"lint", "--format", "json", "--from", run}
		opts := results.Options{}
		if drain != "" {
			args = append(args, "--drain", drain)
			opts.Drain = 30e9
		}
		rec := results.Summarize(file, opts).Doc().Recommendation
		out, err := runApp(t, append(args, filepath.Join(lintTestdata, "rules", "EPW002.yaml"))...)
		if exitCode(err) != 3 {
			t.Fatalf("exit %d (%v)", exitCode(err), err)
		}
		var rep struct {
			Target struct {
				PreStopSeconds int64 `json:"prestop_seconds"`
				DrainNS        int64 `json:"drain_ns"`
				HeadroomNS     int64 `json:"headroom_ns"`
			} `json:"target"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Target.PreStopSeconds != rec.PreStopSeconds || rep.Target.DrainNS != rec.DrainNS || rep.Target.HeadroomNS != rec.HeadroomNS {
			t.Errorf("drain %q: target %+v, recommendation preStop %ds drain %d headroom %d", drain, rep.Target, rec.PreStopSeconds, rec.DrainNS, rec.HeadroomNS)
		}
		got := lint.FromRecommendation(rec, run).GraceSeconds(0)
		if got != rec.GraceSeconds {
			t.Errorf("drain %q: lint's grace %ds, the recommendation's %ds", drain, got, rec.GraceSeconds)
		}
	}
}

// TestPolicyCommand: two objects, the binding's actions and selector from
// the flags; bad flags exit 2 naming the flag.
func TestPolicyCommand(t *testing.T) {
	out, err := runApp(t, "policy", "--prestop", "8s", "--drain", "30s", "--action", "Warn,Audit", "--namespace-selector", "team=shop", "--ignore", "EPW006")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(out, "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("want 2 YAML documents, got %d:\n%s", len(docs), out)
	}
	var p admissionv1.ValidatingAdmissionPolicy
	var b admissionv1.ValidatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &p); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &b); err != nil {
		t.Fatal(err)
	}
	if p.Kind != "ValidatingAdmissionPolicy" || p.APIVersion != "admissionregistration.k8s.io/v1" || b.Spec.PolicyName != p.Name {
		t.Errorf("policy %s/%s %s, binding for %q", p.APIVersion, p.Kind, p.Name, b.Spec.PolicyName)
	}
	if got := b.Spec.ValidationActions; len(got) != 2 || got[0] != admissionv1.Warn || got[1] != admissionv1.Audit {
		t.Errorf("validationActions %v", got)
	}
	if sel := b.Spec.MatchResources.NamespaceSelector; sel == nil || sel.MatchLabels["team"] != "shop" {
		t.Errorf("namespace selector %v", sel)
	}
	enforced := 0
	for _, r := range lint.Rules {
		if r.Policy && r.ID != lint.RuleProbesShared {
			enforced++
		}
	}
	if len(p.Spec.Validations) != enforced {
		t.Errorf("%d validations, want %d (the CEL rules but the ignored one)", len(p.Spec.Validations), enforced)
	}
	for _, v := range p.Spec.Validations {
		if strings.Contains(v.MessageExpression, "EPW006") {
			t.Errorf("--ignore EPW006 left its validation in")
		}
	}
	for args, flag := range map[string]string{
		"--prestop 8s --action Block":                "--action",
		"--prestop 8s --action Deny,Warn":            "--action",
		"--prestop 8s --namespace-selector a=(":      "--namespace-selector",
		"--drain 3s":                                 "--prestop",
		"--prestop 8s --http-prestop prestop=3s":     "--http-prestop",
		"--prestop 8s --ignore EPW001,EPW002,EPW003": "",
	} {
		_, err := runApp(t, append([]string{"policy"}, strings.Fields(args)...)...)
		if flag == "" {
			if err != nil {
				t.Errorf("policy %s: %v", args, err)
			}
			continue
		}
		if exitCode(err) != 2 || !strings.Contains(err.Error(), flag) {
			t.Errorf("policy %s: want exit 2 naming %s, got %v", args, flag, err)
		}
	}
}

// A recommendation that is only a floor (its bound fell on a trial cut at
// the hold: results' censored.jsonl) is not a number to hold workloads to:
// lint --from and policy --from refuse it (exit 6, naming the rerun)
// unless --accept-lower-bound says to hold them to at least that.
func TestFromRefusesLowerBound(t *testing.T) {
	dir := t.TempDir()
	manifest := filepath.Join(dir, "app.yaml")
	if err := os.WriteFile(manifest, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	from := testdata("censored.jsonl")
	for _, args := range [][]string{{"lint", "--from", from, manifest}, {"policy", "--from", from}} {
		_, err := runApp(t, args...)
		if code := exitCode(err); code != exitLowerBound || !strings.Contains(err.Error(), "--hold 8s") || !strings.Contains(err.Error(), "--accept-lower-bound") {
			t.Errorf("%v: exit %d (%v), want %d naming --hold 8s and --accept-lower-bound", args, code, err, exitLowerBound)
		}
		accepted := append([]string{args[0], "--accept-lower-bound"}, args[1:]...)
		if _, err := runApp(t, accepted...); exitCode(err) != 0 {
			t.Errorf("%v: exit %d (%v), want 0", accepted, exitCode(err), err)
		}
	}
}
