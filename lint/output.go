package lint

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"
)

// Report is one lint run: the number and the findings.
type Report struct {
	Target   Target
	Findings []Finding
	// Checked counts the workloads looked at.
	Checked int
	// ToolVersion goes into SARIF's driver.version.
	ToolVersion string
}

// Failing counts the findings no waiver silences.
func (r *Report) Failing() int {
	n := 0
	for _, f := range r.Findings {
		if f.Waived == "" {
			n++
		}
	}
	return n
}

// Writer renders a report.
type Writer func(io.Writer, *Report) error

// Writers are the --format values.
var Writers = map[string]Writer{
	"text":  WriteText,
	"json":  WriteJSON,
	"sarif": WriteSARIF,
}

// WriteText prints one block per unwaived finding (location, rule, object,
// what is wrong, why, the fix), then a count line.
func WriteText(w io.Writer, r *Report) error {
	var b strings.Builder
	waived := 0
	for _, f := range r.Findings {
		if f.Waived != "" {
			waived++
			continue
		}
		rule := mustRule(f.Rule)
		fmt.Fprintf(&b, "%s: %s %s (%s): %s\n", f.Location(), f.Rule, f.Name, f.Level, f.Object)
		fmt.Fprintf(&b, "    %s\n", f.Message)
		fmt.Fprintf(&b, "    why: %s\n", rule.Reason)
		fmt.Fprintf(&b, "    fix: %s\n", f.Fix)
	}
	held := fmt.Sprintf("preStop ≥ %ds, terminationGracePeriodSeconds ≥ preStop + %s drain + %s headroom (%s)",
		r.Target.PreStopSeconds(), r.Target.Drain, r.Target.Headroom, r.Target.From)
	switch n := r.Failing(); {
	case n == 0:
		fmt.Fprintf(&b, "%s clean: %s", plural(r.Checked, "workload", "workloads"), held)
	default:
		fmt.Fprintf(&b, "%s in %s: %s", plural(n, "finding", "findings"), plural(r.Checked, "workload", "workloads"), held)
	}
	if waived > 0 {
		fmt.Fprintf(&b, "; %d waived by annotation", waived)
	}
	fmt.Fprintf(&b, "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// jsonReport is WriteJSON's document; durations in _ns.
type jsonReport struct {
	Target struct {
		PreStopSeconds int64  `json:"prestop_seconds"`
		DrainNS        int64  `json:"drain_ns"`
		HeadroomNS     int64  `json:"headroom_ns"`
		From           string `json:"from"`
	} `json:"target"`
	Checked  int       `json:"workloads"`
	Failing  int       `json:"failing"`
	Findings []Finding `json:"findings"`
	Rules    []Rule    `json:"rules"`
}

// WriteJSON writes the report as one JSON document, waived findings
// included (with their reason).
func WriteJSON(w io.Writer, r *Report) error {
	var doc jsonReport
	doc.Target.PreStopSeconds = r.Target.PreStopSeconds()
	doc.Target.DrainNS, doc.Target.HeadroomNS, doc.Target.From = int64(r.Target.Drain), int64(r.Target.Headroom), r.Target.From
	doc.Checked, doc.Failing, doc.Findings, doc.Rules = r.Checked, r.Failing(), r.Findings, Rules
	if doc.Findings == nil {
		doc.Findings = []Finding{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// SARIF 2.1.0 (OASIS), the subset code-scanning uploads read.
type (
	sarifLog struct {
		Schema  string     `json:"$schema"`
		Version string     `json:"version"`
		Runs    []sarifRun `json:"runs"`
	}
	sarifRun struct {
		Tool    sarifTool     `json:"tool"`
		Results []sarifResult `json:"results"`
	}
	sarifTool struct {
		Driver sarifDriver `json:"driver"`
	}
	sarifDriver struct {
		Name           string      `json:"name"`
		Version        string      `json:"version,omitempty"`
		InformationURI string      `json:"informationUri,omitempty"`
		Rules          []sarifRule `json:"rules"`
	}
	sarifText struct {
		Text string `json:"text"`
	}
	sarifRule struct {
		ID                   string    `json:"id"`
		Name                 string    `json:"name"`
		ShortDescription     sarifText `json:"shortDescription"`
		FullDescription      sarifText `json:"fullDescription"`
		Help                 sarifText `json:"help"`
		DefaultConfiguration struct {
			Level Level `json:"level"`
		} `json:"defaultConfiguration"`
	}
	sarifResult struct {
		RuleID       string             `json:"ruleId"`
		RuleIndex    int                `json:"ruleIndex"`
		Level        Level              `json:"level"`
		Message      sarifText          `json:"message"`
		Locations    []sarifLocation    `json:"locations"`
		Suppressions []sarifSuppression `json:"suppressions,omitempty"`
	}
	sarifLocation struct {
		PhysicalLocation *sarifPhysical `json:"physicalLocation,omitempty"`
		LogicalLocations []sarifLogical `json:"logicalLocations,omitempty"`
	}
	sarifPhysical struct {
		ArtifactLocation struct {
			URI string `json:"uri"`
		} `json:"artifactLocation"`
		Region *sarifRegion `json:"region,omitempty"`
	}
	sarifRegion struct {
		StartLine   int `json:"startLine"`
		StartColumn int `json:"startColumn,omitempty"`
	}
	sarifLogical struct {
		Name               string `json:"name"`
		FullyQualifiedName string `json:"fullyQualifiedName"`
		Kind               string `json:"kind"`
	}
	sarifSuppression struct {
		Kind          string `json:"kind"`
		Justification string `json:"justification"`
	}
)

// SARIFSchema is the schema URI WriteSARIF declares.
const SARIFSchema = "https://json.schemastore.org/sarif-2.1.0.json"

// WriteSARIF writes a SARIF 2.1.0 log for code-scanning uploads: every
// rule in tool.driver.rules, one result per finding located by file,
// line and column (or by the object's name for live objects), waived ones
// with an inSource suppression carrying the waiver's reason.
func WriteSARIF(w io.Writer, r *Report) error {
	drv := sarifDriver{Name: "epwindow", Version: r.ToolVersion, InformationURI: "https://github.com/epwindow/epwindow"}
	index := map[string]int{}
	for i, rule := range Rules {
		sr := sarifRule{ID: rule.ID, Name: rule.Name,
			ShortDescription: sarifText{rule.Reason}, FullDescription: sarifText{rule.Reason},
			Help: sarifText{"Fix: " + rule.Fix}}
		sr.DefaultConfiguration.Level = rule.Level
		drv.Rules = append(drv.Rules, sr)
		index[rule.ID] = i
	}
	run := sarifRun{Tool: sarifTool{Driver: drv}, Results: []sarifResult{}}
	for _, f := range r.Findings {
		res := sarifResult{RuleID: f.Rule, RuleIndex: index[f.Rule], Level: f.Level,
			Message: sarifText{fmt.Sprintf("%s: %s. Fix: %s", f.Object, f.Message, f.Fix)}}
		loc := sarifLocation{LogicalLocations: []sarifLogical{{
			Name: f.ObjName, FullyQualifiedName: strings.TrimPrefix(f.Namespace+"/"+f.ObjName, "/") + "." + f.Field,
			Kind: "object"}}}
		if f.File != "" {
			p := &sarifPhysical{}
			p.ArtifactLocation.URI = (&url.URL{Path: filepath.ToSlash(f.File)}).String()
			if f.Line > 0 {
				p.Region = &sarifRegion{StartLine: f.Line, StartColumn: f.Column}
			}
			loc.PhysicalLocation = p
		}
		res.Locations = []sarifLocation{loc}
		if f.Waived != "" {
			res.Suppressions = []sarifSuppression{{Kind: "inSource", Justification: f.Waived}}
		}
		run.Results = append(run.Results, res)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sarifLog{Schema: SARIFSchema, Version: "2.1.0", Runs: []sarifRun{run}})
}
