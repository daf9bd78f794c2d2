package lint

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// testTarget is what the testdata manifests are written against:
// preStop ≥ 10 s, grace ≥ preStop + 25 s.
var testTarget = Target{PreStop: 10 * time.Second, Drain: 20 * time.Second, Headroom: 5 * time.Second, From: "test"}

func testOptions() Options {
	return Options{Target: testTarget, HTTPSleeps: map[string]time.Duration{"/prestop": 10 * time.Second}}
}

var wantRE = regexp.MustCompile(`#\s*want((\s+EPW\d{3})+)\s*$`)

// wants reads the "# want EPWnnn" comments of a testdata file: the line
// each finding must be reported on.
func wants(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if m := wantRE.FindStringSubmatch(sc.Text()); m != nil {
			for _, id := range strings.Fields(m[1]) {
				out = append(out, fmt.Sprintf("%d %s", line, id))
			}
		}
	}
	slices.Sort(out)
	return out
}

func checkFile(t *testing.T, path string, o Options) []Finding {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	objs, err := ParseYAML(path, f)
	if err != nil {
		t.Fatal(err)
	}
	findings, err := Check(objs, o)
	if err != nil {
		t.Fatal(err)
	}
	return findings
}

func got(findings []Finding) []string {
	var out []string
	for _, f := range findings {
		if f.Waived == "" {
			out = append(out, fmt.Sprintf("%d %s", f.Line, f.Rule))
		}
	}
	slices.Sort(out)
	return out
}

// TestRules runs every rule over its bad manifests (each finding's line is
// marked "# want RULE" in the file, and nothing else may be reported) and
// over good.yaml, which holds one compliant workload of every kind.
func TestRules(t *testing.T) {
	tests := []struct {
		file string
		rule string
	}{
		{"good.yaml", ""},
		{"EPW001.yaml", RuleReadinessProbe},
		{"EPW002.yaml", RulePreStopMissing},
		{"EPW003.yaml", RulePreStopShort},
		{"EPW004.yaml", RulePreStopUnknown},
		{"EPW005.yaml", RuleGraceShort},
		{"EPW006.yaml", RuleProbesShared},
		{"EPW007.yaml", RuleShellPID1},
		{"EPW008.yaml", RuleDistrolessExec},
		{"EPW009.yaml", RuleDeregistration},
		{"EPW010.yaml", RuleReadinessGate},
		{"EPW011.yaml", RuleAnnotationSyntax},
		{"EPW012.yaml", RuleHeadlessNotReady},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", "rules", tt.file)
			want := wants(t, path)
			findings := checkFile(t, path, testOptions())
			if g := got(findings); !slices.Equal(g, want) {
				t.Errorf("findings (line rule):\n got %q\nwant %q", g, want)
				for _, f := range findings {
					t.Logf("%s: %s %s", f.Location(), f.Rule, f.Message)
				}
			}
			if tt.rule == "" {
				return
			}
			n := 0
			for _, w := range want {
				if strings.HasSuffix(w, " "+tt.rule) {
					n++
				}
			}
			if n == 0 {
				t.Fatalf("%s marks no %s finding", tt.file, tt.rule)
			}
			for _, f := range findings {
				if f.File != path || f.Column == 0 || f.Message == "" || f.Fix == "" || f.Object == "" {
					t.Errorf("finding lacks its location or text: %+v", f)
				}
			}
			// --ignore drops the rule and nothing else.
			o := testOptions()
			o.Ignore = map[string]bool{tt.rule: true}
			var rest []string
			for _, w := range want {
				if !strings.HasSuffix(w, " "+tt.rule) {
					rest = append(rest, w)
				}
			}
			if g := got(checkFile(t, path, o)); !slices.Equal(g, rest) {
				t.Errorf("--ignore %s: got %q, want %q", tt.rule, g, rest)
			}
		})
	}
}

// TestPositions pins line and column: the key the finding is about.
func TestPositions(t *testing.T) {
	findings := checkFile(t, filepath.Join("testdata", "rules", "EPW005.yaml"), testOptions())
	want := []Position{{11, 5}, {34, 7}, {56, 11}, {81, 7}}
	if len(findings) != len(want) {
		t.Fatalf("got %d findings, want %d: %+v", len(findings), len(want), findings)
	}
	for i, f := range findings {
		if f.Position != want[i] {
			t.Errorf("finding %d (%s %s) at %d:%d, want %d:%d", i, f.Rule, f.Object, f.Line, f.Column, want[i].Line, want[i].Column)
		}
	}
	if f := findings[2]; f.Field != "spec.jobTemplate.spec.template.spec.terminationGracePeriodSeconds" || f.Location() != findings[2].File+":56:11" {
		t.Errorf("CronJob finding: field %q, location %q", f.Field, f.Location())
	}
	if !strings.Contains(findings[1].Message, "terminationGracePeriodSeconds 40 < preStop 20s + drain 20s + headroom 5s = 45s") ||
		findings[1].Fix != "set terminationGracePeriodSeconds: 45" {
		t.Errorf("grace finding: %q, fix %q", findings[1].Message, findings[1].Fix)
	}
	// epwindow.io/stream-drain: 30s replaces the 20 s drain.
	if !strings.Contains(findings[3].Message, "< preStop 20s + drain 30s + headroom 5s = 55s") ||
		findings[3].Fix != "set terminationGracePeriodSeconds: 55" {
		t.Errorf("stream-drain finding: %q, fix %q", findings[3].Message, findings[3].Fix)
	}
}

// TestWaiver: the annotation silences one rule on one object with its
// reason; the finding is kept (reports show it as waived), but it fails
// nothing.
func TestWaiver(t *testing.T) {
	doc := `apiVersion: v1
kind: Pod
metadata:
  name: waived
  annotations:
    lint.epwindow.io/grace-too-short: "drains in 1 s; measured in INC-42"
spec:
  containers:
  - name: app
    image: a
    ports: [{containerPort: 80}]
    readinessProbe: {tcpSocket: {port: 80}}
    lifecycle: {preStop: {sleep: {seconds: 10}}}
`
	objs, err := ParseYAML("pod.yaml", strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	findings, err := Check(objs, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(findings) != 1 || findings[0].Rule != RuleGraceShort || findings[0].Waived != "drains in 1 s; measured in INC-42" {
		t.Fatalf("want one waived %s finding, got %+v", RuleGraceShort, findings)
	}
	rep := &Report{Target: testTarget, Findings: findings, Checked: 1}
	if rep.Failing() != 0 {
		t.Errorf("a waived finding fails the lint")
	}
	var b strings.Builder
	if err := WriteText(&b, rep); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "EPW005") || !strings.Contains(b.String(), "1 workload clean") || !strings.Contains(b.String(), "1 waived") {
		t.Errorf("text report of a waived finding:\n%s", b.String())
	}
}

// TestParseErrors: unreadable YAML names the file and the line.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		doc  string
		line int
	}{
		{"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n   bad: indent\n", 5},
		{"kind: Pod\n---\nkind: Service\nspec: [\n", 4},
		{"- a\n- b\n", 1},
		{"kind: Pod\n---\n- just\n- a list\n", 3},
	}
	for _, tt := range tests {
		_, err := ParseYAML("in.yaml", strings.NewReader(tt.doc))
		ie, ok := err.(*InputError)
		if !ok {
			t.Errorf("%q: want an *InputError, got %v", tt.doc, err)
			continue
		}
		if ie.File != "in.yaml" || ie.Line != tt.line || !strings.HasPrefix(err.Error(), fmt.Sprintf("in.yaml:%d: ", tt.line)) {
			t.Errorf("%q: got %q (line %d), want line %d", tt.doc, err, ie.Line, tt.line)
		}
	}
}

// TestTarget: the grace period counts the preStop inside it, in whole
// seconds, and a longer cover than the number raises it.
func TestTarget(t *testing.T) {
	tg := Target{PreStop: 7500 * time.Millisecond, Drain: 2500 * time.Millisecond, Headroom: 5 * time.Second}
	if tg.PreStopSeconds() != 8 || tg.TailSeconds() != 8 || tg.GraceSeconds(0) != 16 || tg.GraceSeconds(12*time.Second) != 20 {
		t.Errorf("preStop %d tail %d grace(0) %d grace(12s) %d, want 8 8 16 20", tg.PreStopSeconds(), tg.TailSeconds(), tg.GraceSeconds(0), tg.GraceSeconds(12*time.Second))
	}
	for _, bad := range []Target{{}, {PreStop: time.Second, Drain: -1}, {PreStop: time.Second, Headroom: -1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validates", bad)
		}
	}
}

// TestKustomize builds an overlay in memory and locates each finding in
// the base file the object came from: the base's missing readiness probe
// at its container, the overlay's too-short grace period at the field the
// patch overrides.
func TestKustomize(t *testing.T) {
	dir := filepath.Join("testdata", "kustomize", "overlay")
	if !IsKustomization(dir) || IsKustomization(filepath.Join("testdata", "rules")) {
		t.Fatal("IsKustomization")
	}
	objs, err := Kustomize(dir)
	if err != nil {
		t.Fatal(err)
	}
	findings, err := Check(objs, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join("testdata", "kustomize", "base", "deployment.yaml")
	var g []string
	for _, f := range findings {
		g = append(g, fmt.Sprintf("%s %s %s", f.Location(), f.Rule, f.Object))
	}
	want := []string{
		base + ":12:7 EPW005 Deployment prod/prod-web",
		base + ":14:9 EPW001 Deployment prod/prod-web",
		filepath.Join("testdata", "kustomize", "base", "ingress.yaml") + ":3:1 EPW009 Ingress prod/prod-web",
	}
	if !slices.Equal(g, want) {
		t.Errorf("got %q\nwant %q", g, want)
	}
	if len(findings) > 0 && !strings.Contains(findings[0].Message, "terminationGracePeriodSeconds 20 <") {
		t.Errorf("the grace finding reads the patched value: %q", findings[0].Message)
	}
	for _, o := range objs {
		if _, ok := annotations(o)[originAnnotation]; ok {
			t.Errorf("%s keeps the origin annotation the build added", o.Ref())
		}
	}
	if _, err := Kustomize(filepath.Join("testdata", "rules")); err == nil {
		t.Error("a directory without a kustomization builds")
	}
}
