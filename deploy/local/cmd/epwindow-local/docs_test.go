package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docsDir is the repository's docs/, from this package (deploy/local is a
// module of its own, so the tool's docs test cannot reach up's flags).
const docsDir = "../../../../docs"

// otherFlags are flags docs/local-cluster.md names in its prose that are
// another program's, not up's: the page says what up's flags become.
var otherFlags = map[string]string{
	"endpointslice-updates-batch-period": "kube-controller-manager's, which --batch-period sets",
	"cleanup":                            "kube-proxy's, which teardown runs",
}

// Every flag of `epwindow-local up` that the docs name — in an
// `epwindow-local up` command of any page's code blocks, or as an inline
// `--flag` of docs/local-cluster.md's prose — is one that `up --help`
// shows: a flag the help leaves out is one users cannot find.
func TestDocsUpFlags(t *testing.T) {
	var help bytes.Buffer
	upHelp(&help)
	pages, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no docs in %s: %v", docsDir, err)
	}
	var named []docFlag
	for _, p := range pages {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		named = append(named, upCommandFlags(filepath.Base(p), data)...)
		if filepath.Base(p) == "local-cluster.md" {
			prose := proseFlags(filepath.Base(p), data)
			for name := range otherFlags {
				if !slices.ContainsFunc(prose, func(f docFlag) bool { return f.name == name }) {
					t.Errorf("otherFlags lists --%s, which local-cluster.md no longer names: drop it", name)
				}
			}
			named = append(named, ofUp(prose)...)
		}
	}
	// The synopsis alone names a dozen: far fewer means the extraction
	// broke, not that the docs are true.
	if len(named) < 20 {
		t.Fatalf("found only %d flags of up in the docs: %v", len(named), named)
	}
	for _, f := range unshown(help.String(), named) {
		t.Errorf("%s: --%s is not in `epwindow-local up --help`", f.where, f.name)
	}
}

// The check can fail: a flag the help does not show is caught in a
// command, a synopsis's optional part and the prose, and other programs'
// flags and other commands' are not taken for up's.
func TestDocsUpFlagsCatchMistakes(t *testing.T) {
	page := "Run it:\n\n```sh\nbin/epwindow-local up --dir /tmp/x [--nodes 2] \\\n" +
		"    [--no-such 3] --other=1 &   # --in-a-comment\nepwindow measure --not-up\n```\n\n" +
		"`--prose-flag` turns it on; kube-proxy's `--cleanup` does not count, nor `epwindow measure\n--url`.\n"
	named := append(upCommandFlags("x.md", []byte(page)), ofUp(proseFlags("x.md", []byte(page)))...)
	var got []string
	for _, f := range unshown("  --dir string\n  --nodes int\n", named) {
		got = append(got, f.where+" "+f.name)
	}
	want := []string{"x.md:4 no-such", "x.md:4 other", "x.md:9 prose-flag"}
	if !slices.Equal(got, want) {
		t.Errorf("caught %q, want %q", got, want)
	}
}

// docFlag is one flag the docs name, and where.
type docFlag struct{ where, name string }

var (
	// fenceLine opens or closes a Markdown code block.
	fenceLine = regexp.MustCompile("^\\s*```")
	// flagWord is a flag where a word starts (also after "[", an optional
	// part of a synopsis); its name stops at "=" or the value.
	flagWord = regexp.MustCompile(`(?:^|[\s\[])--([a-z][a-z0-9-]*)`)
	// inlineCode is a Markdown code span, which may wrap a line.
	inlineCode = regexp.MustCompile("`([^`]+)`")
)

// upCommandFlags returns the flags of every `epwindow-local up` command in
// a page's code blocks: line continuations joined, up to a comment or the
// end of the command (&, ;, a pipe with spaces around it).
func upCommandFlags(file string, page []byte) []docFlag {
	var out []docFlag
	inBlock := false
	lines := strings.Split(string(page), "\n")
	for i := 0; i < len(lines); i++ {
		if fenceLine.MatchString(lines[i]) {
			inBlock = !inBlock
			continue
		}
		start := i + 1
		text := lines[i]
		for strings.HasSuffix(text, "\\") && i+1 < len(lines) {
			i++
			text = strings.TrimSuffix(text, "\\") + " " + lines[i]
		}
		_, cmd, ok := strings.Cut(text, "epwindow-local up")
		if !inBlock || !ok {
			continue
		}
		for _, end := range []string{" #", "&", ";", " | "} {
			cmd, _, _ = strings.Cut(cmd, end)
		}
		for _, m := range flagWord.FindAllStringSubmatch(cmd, -1) {
			out = append(out, docFlag{fmt.Sprintf("%s:%d", file, start), m[1]})
		}
	}
	return out
}

// proseFlags returns the flags a page's prose names as code spans that
// start with one (`--dns`, `--ingress traefik|all`), outside code blocks;
// a span naming a command (`epwindow measure --dns ...`) is that
// command's.
func proseFlags(file string, page []byte) []docFlag {
	var prose strings.Builder
	inBlock := false
	sc := bufio.NewScanner(bytes.NewReader(page))
	for sc.Scan() {
		if fenceLine.MatchString(sc.Text()) {
			inBlock = !inBlock
			prose.WriteString("\n")
			continue
		}
		if !inBlock {
			prose.WriteString(sc.Text())
		}
		prose.WriteString("\n")
	}
	text := prose.String()
	var out []docFlag
	for _, m := range inlineCode.FindAllStringSubmatchIndex(text, -1) {
		span := text[m[2]:m[3]]
		f := flagWord.FindStringSubmatch(span)
		if f == nil || !strings.HasPrefix(span, "--") {
			continue
		}
		line := 1 + strings.Count(text[:m[0]], "\n")
		out = append(out, docFlag{fmt.Sprintf("%s:%d", file, line), f[1]})
	}
	return out
}

// ofUp drops otherFlags, another program's.
func ofUp(named []docFlag) []docFlag {
	return slices.DeleteFunc(slices.Clone(named), func(f docFlag) bool { return otherFlags[f.name] != "" })
}

// unshown are the flags of named that help does not show as "--NAME".
func unshown(help string, named []docFlag) []docFlag {
	var out []docFlag
	for _, f := range named {
		if !regexp.MustCompile(`--` + regexp.QuoteMeta(f.name) + `(\s|$)`).MatchString(help) {
			out = append(out, f)
		}
	}
	return out
}
