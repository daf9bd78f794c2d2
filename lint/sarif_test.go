package lint

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// sarifSubset is testdata/sarif-2.1.0-subset.json: the schema's rules for
// the objects WriteSARIF writes.
type sarifSubset struct {
	Objects map[string]struct {
		Required []string `json:"required"`
		AnyOf    []string `json:"anyOf"`
		Allowed  []string `json:"allowed"`
	} `json:"objects"`
	Enums    map[string][]string `json:"enums"`
	Minimums map[string]float64  `json:"minimums"`
}

// sarifValidator walks a decoded log and checks each object against its
// schema definition.
type sarifValidator struct {
	t      *testing.T
	schema sarifSubset
}

func (v *sarifValidator) object(def, at string, x any) map[string]any {
	v.t.Helper()
	m, ok := x.(map[string]any)
	if !ok {
		v.t.Errorf("%s: want a %s object, got %T", at, def, x)
		return nil
	}
	d, ok := v.schema.Objects[def]
	if !ok {
		v.t.Fatalf("schema subset lacks %s", def)
	}
	for _, r := range d.Required {
		if _, ok := m[r]; !ok {
			v.t.Errorf("%s (%s): required property %q missing", at, def, r)
		}
	}
	if len(d.AnyOf) > 0 && !slices.ContainsFunc(d.AnyOf, func(k string) bool { _, ok := m[k]; return ok }) {
		v.t.Errorf("%s (%s): needs one of %v", at, def, d.AnyOf)
	}
	for k, val := range m {
		if !slices.Contains(d.Allowed, k) {
			v.t.Errorf("%s (%s): property %q is not in the schema (additionalProperties: false)", at, def, k)
		}
		if enum, ok := v.schema.Enums[def+"."+k]; ok && !slices.Contains(enum, val.(string)) {
			v.t.Errorf("%s.%s = %v, want one of %v", at, k, val, enum)
		}
		if lo, ok := v.schema.Minimums[def+"."+k]; ok && val.(float64) < lo {
			v.t.Errorf("%s.%s = %v, below the minimum %v", at, k, val, lo)
		}
	}
	return m
}

func (v *sarifValidator) list(at string, x any) []any {
	v.t.Helper()
	l, ok := x.([]any)
	if !ok {
		v.t.Errorf("%s: want an array, got %T", at, x)
	}
	return l
}

// TestSARIF validates WriteSARIF's log against the SARIF 2.1.0 schema's
// structure for file findings, a live object's finding and a waived one.
func TestSARIF(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "sarif-2.1.0-subset.json"))
	if err != nil {
		t.Fatal(err)
	}
	v := &sarifValidator{t: t}
	if err := json.Unmarshal(raw, &v.schema); err != nil {
		t.Fatal(err)
	}
	findings := checkFile(t, filepath.Join("testdata", "rules", "EPW005.yaml"), testOptions())
	live := findings[0]
	live.File, live.Position = "", Position{}
	waived := findings[1]
	waived.Waived = "batch job: nothing routes to it"
	findings = append(findings, live, waived)

	var buf bytes.Buffer
	if err := WriteSARIF(&buf, &Report{Target: testTarget, Findings: findings, ToolVersion: "v0.0.0-test"}); err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	log := v.object("sarifLog", "$", doc)
	runs := v.list("runs", log["runs"])
	if len(runs) != 1 {
		t.Fatalf("want 1 run, got %d", len(runs))
	}
	run := v.object("run", "runs[0]", runs[0])
	tool := v.object("tool", "tool", run["tool"])
	driver := v.object("toolComponent", "driver", tool["driver"])
	var ids []string
	for _, r := range v.list("rules", driver["rules"]) {
		rule := v.object("reportingDescriptor", "rule", r)
		ids = append(ids, rule["id"].(string))
		for _, k := range []string{"shortDescription", "fullDescription", "help"} {
			v.object("multiformatMessageString", "rule."+k, rule[k])
		}
		v.object("reportingConfiguration", "rule.defaultConfiguration", rule["defaultConfiguration"])
	}
	if len(ids) != len(Rules) {
		t.Errorf("driver lists %d rules, want %d", len(ids), len(Rules))
	}
	results := v.list("results", run["results"])
	if len(results) != len(findings) {
		t.Fatalf("%d results for %d findings", len(results), len(findings))
	}
	suppressed := 0
	for i, x := range results {
		res := v.object("result", "result", x)
		msg := v.object("message", "result.message", res["message"])
		if msg["text"] == "" {
			t.Errorf("result %d: empty message", i)
		}
		idx := int(res["ruleIndex"].(float64))
		if idx >= len(ids) || ids[idx] != res["ruleId"] {
			t.Errorf("result %d: ruleIndex %d does not point at ruleId %v", i, idx, res["ruleId"])
		}
		locs := v.list("locations", res["locations"])
		if len(locs) != 1 {
			t.Fatalf("result %d: %d locations", i, len(locs))
		}
		loc := v.object("location", "location", locs[0])
		for _, l := range v.list("logicalLocations", loc["logicalLocations"]) {
			v.object("logicalLocation", "logicalLocation", l)
		}
		f := findings[i]
		if pl, ok := loc["physicalLocation"]; ok {
			p := v.object("physicalLocation", "physicalLocation", pl)
			al := v.object("artifactLocation", "artifactLocation", p["artifactLocation"])
			u, err := url.Parse(al["uri"].(string))
			if err != nil || u.Path != filepath.ToSlash(f.File) {
				t.Errorf("result %d: uri %v (%v), want %s", i, al["uri"], err, f.File)
			}
			reg := v.object("region", "region", p["region"])
			if int(reg["startLine"].(float64)) != f.Line || int(reg["startColumn"].(float64)) != f.Column {
				t.Errorf("result %d: region %v, want %d:%d", i, reg, f.Line, f.Column)
			}
		} else if f.File != "" {
			t.Errorf("result %d: a file finding without a physicalLocation", i)
		}
		if s, ok := res["suppressions"]; ok {
			for _, x := range v.list("suppressions", s) {
				sup := v.object("suppression", "suppression", x)
				if sup["justification"] != f.Waived {
					t.Errorf("suppression justification %v, want %q", sup["justification"], f.Waived)
				}
				suppressed++
			}
		}
	}
	if suppressed != 1 {
		t.Errorf("%d suppressed results, want the 1 waived finding", suppressed)
	}
}
