package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
	"mvdan.cc/sh/v3/syntax"
)

// docFiles are the user documentation whose commands TestDocsCommands
// keeps true: the README and every page under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../../README.md"}, files...)
	if len(files) < 2 {
		t.Fatalf("no docs found: %v", files)
	}
	return files
}

// docCommand is one epwindow command line from a code block.
type docCommand struct {
	where string   // file:line
	argv  []string // "epwindow", then the arguments as the shell passes them
}

// Every `epwindow …` and `kubectl epwindow …` command in the README's and
// docs' code blocks parses with the real CLI (actions replaced, nothing
// runs): no unknown flag or subcommand, no flag without its value, and as
// many positional arguments as the subcommand's ArgsUsage names.
func TestDocsCommands(t *testing.T) {
	var all []docCommand
	for _, f := range docFiles(t) {
		cmds, err := commandsInMarkdown(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, cmds...)
	}
	// The docs show every subcommand at least once; far fewer commands
	// than that means the extraction broke, not that the docs are true.
	if len(all) < 30 {
		t.Fatalf("found only %d epwindow commands in the docs", len(all))
	}
	seen := map[string]bool{}
	for _, dc := range all {
		name, err := checkCommand(dc.argv)
		if err != nil {
			t.Errorf("%s: %s: %v", dc.where, strings.Join(dc.argv, " "), err)
		}
		seen[name] = true
	}
	for _, want := range []string{"measure", "report", "compare", "verify", "lint", "policy", "manifests"} {
		if !seen[want] {
			t.Errorf("no `epwindow %s` command found in the docs' code blocks", want)
		}
	}
}

// The examples in each subcommand's help (its UsageText) parse too: they
// are documentation that `--help` prints. A synopsis line ("… [options]",
// with placeholders such as URL or TIME|DURATION) is not an example.
func TestUsageTextCommands(t *testing.T) {
	for _, cmd := range newApp("epwindow").Commands {
		var examples []string
		for _, line := range strings.Split(cmd.UsageText, "\n") {
			if !strings.Contains(line, "[options]") {
				examples = append(examples, line)
			}
		}
		text := strings.Join(examples, "\n")
		cmds, err := commandsInBlock(cmd.Name+" UsageText", 1, text)
		if err != nil {
			t.Fatal(err)
		}
		if len(cmds) == 0 {
			t.Errorf("%s: no example in its UsageText", cmd.Name)
		}
		for _, dc := range cmds {
			if _, err := checkCommand(dc.argv); err != nil {
				t.Errorf("%s: %s: %v", dc.where, strings.Join(dc.argv, " "), err)
			}
		}
	}
}

// The check must be able to fail: invented flags, a missing value, an
// unknown subcommand and a misplaced argument are each caught, in a code
// block as the docs write them.
func TestDocsCommandsCatchMistakes(t *testing.T) {
	for _, tc := range []struct{ block, want string }{
		{"epwindow measure --url http://<ingress address> --no-such-flag 3", "no-such-flag"},
		{"$ epwindow report --format markdown run.jsonl --sideways", "sideways"},
		{"epwindow verify -n shop checkout --url http://x \\\n    --host a.example.com --rate", "rate"},
		{"epwindow measurify --url http://x", "measurify"},
		{"epwindow measure run.jsonl --url http://x   # a file where none is taken", "arguments"},
		{"cat a.jsonl | epwindow compare a.jsonl   # one file short", "arguments"},
		{"kubectl epwindow report --plots run.jsonl > out.txt", "plots"},
	} {
		cmds, err := commandsInBlock("test.md", 1, tc.block)
		if err != nil || len(cmds) != 1 {
			t.Fatalf("%q: found %d commands, err %v", tc.block, len(cmds), err)
		}
		if _, err := checkCommand(cmds[0].argv); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want one naming %q", tc.block, err, tc.want)
		}
	}
}

// The extraction reads code blocks as a shell does, and leaves out
// placeholders the docs use.
func TestCommandsInBlock(t *testing.T) {
	block := `make build
$ epwindow measure --url http://<gateway address> --host h \
    --route httproute --gateway traefik/gw [--gateway-section web]   # a comment
cat run.jsonl | epwindow report - > out.md
helm template x ./chart | kubectl epwindow lint --from run.jsonl -
epwindow measure ... --baseline b.jsonl --max-p99 window=3s
epwindow measure --upstreams-cmd "aws elbv2 --arn $TG \
      --output text" --url …
bin/epwindow-local up --dir /tmp/x`
	cmds, err := commandsInBlock("x.md", 10, block)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"epwindow", "measure", "--url", "http://PLACEHOLDER", "--host", "h", "--route", "httproute", "--gateway", "traefik/gw", "--gateway-section", "web"},
		{"epwindow", "report", "-"},
		{"epwindow", "lint", "--from", "run.jsonl", "-"},
		{"epwindow", "measure", "...", "--baseline", "b.jsonl", "--max-p99", "window=3s"},
		{"epwindow", "measure", "--upstreams-cmd", "aws elbv2 --arn $TG       --output text", "--url", "…"},
	}
	if len(cmds) != len(want) {
		t.Fatalf("found %d commands, want %d: %v", len(cmds), len(want), cmds)
	}
	for i, c := range cmds {
		if !slices.Equal(c.argv, want[i]) {
			t.Errorf("command %d (%s)\n got %q\nwant %q", i, c.where, c.argv, want[i])
		}
	}
	if cmds[0].where != "x.md:11" {
		t.Errorf("first command at %s, want x.md:11", cmds[0].where)
	}
}

// checkCommand parses argv with the real app and its actions replaced, and
// returns the subcommand's name.
func checkCommand(argv []string) (string, error) {
	p, err := parseOnly(dropEllipses(argv))
	if err != nil {
		return "", err
	}
	if p.ctx == nil { // --help or --version: no action ran
		return "", nil
	}
	cmd := p.ctx.Command
	min, max := arity(cmd.ArgsUsage)
	if n := p.ctx.NArg(); n < min || (max >= 0 && n > max) {
		return p.command, fmt.Errorf("%d positional arguments %q, but `%s` takes %q", n, p.ctx.Args().Slice(), cmd.Name, cmd.ArgsUsage)
	}
	return p.command, nil
}

// dropEllipses removes "..." and "…" where the docs use them for "more
// flags", and keeps them where a flag's value stands.
func dropEllipses(argv []string) []string {
	var cmd *cli.Command
	if len(argv) > 1 {
		cmd = newApp("epwindow").Command(argv[1])
	}
	out := []string{}
	for i, a := range argv {
		if (a == "..." || a == "…") && (cmd == nil || i == 0 || valueArgs(cmd.Flags, argv[i-1]) == 0 ||
			!strings.HasPrefix(argv[i-1], "-")) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// arity reads a subcommand's ArgsUsage ("BASELINE NEW", "[FILE|DIR|-]...")
// as the least and most positional arguments it takes (-1: no limit).
func arity(usage string) (min, max int) {
	for _, w := range strings.Fields(usage) {
		if strings.HasSuffix(w, "...") {
			max = -1
		} else if max >= 0 {
			max++
		}
		if !strings.HasPrefix(w, "[") {
			min++
		}
	}
	return min, max
}

// fence opens or closes a code block: three or more backticks, then the
// block's language on an opening fence.
var fence = regexp.MustCompile("^\\s*(```+)\\s*([a-z]*)\\s*$")

// commandsInMarkdown returns the epwindow commands in a Markdown file's
// shell code blocks (```sh, ```bash, ```console or unlabelled).
func commandsInMarkdown(path string) ([]docCommand, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out     []docCommand
		block   []string
		inBlock bool
		shell   bool
		start   int
		opened  string // the opening fence: a block closes with one at least as long
	)
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		m := fence.FindStringSubmatch(sc.Text())
		switch {
		case m != nil && !inBlock:
			inBlock, block, start, opened = true, nil, line+1, m[1]
			shell = slices.Contains([]string{"", "sh", "bash", "shell", "console"}, m[2])
		case m != nil && m[2] == "" && len(m[1]) >= len(opened):
			inBlock = false
			if shell {
				cmds, err := commandsInBlock(filepath.Base(path), start, strings.Join(block, "\n"))
				if err != nil {
					return nil, err
				}
				out = append(out, cmds...)
			}
		case inBlock:
			block = append(block, sc.Text())
		}
	}
	return out, sc.Err()
}

var (
	// placeholder: <ingress address>, written where a value goes; a "<"
	// followed by a space is a redirection and stays.
	placeholder = regexp.MustCompile(`<[^<>\s][^<>]*>`)
	// optional: [--gateway-section web], an optional flag in a synopsis.
	optional = regexp.MustCompile(`\[(--?[a-zA-Z][^\[\]]*)\]`)
)

// commandsInBlock parses a code block as the shell would (line
// continuations, quotes, comments, pipes and redirections end a command)
// after dropping "$ " prompts and reading placeholders as plain words, and
// returns every command that runs epwindow (also as bin/epwindow or
// kubectl epwindow). A line without "epwindow" is not parsed: blocks also
// hold formulas and output.
func commandsInBlock(file string, firstLine int, block string) ([]docCommand, error) {
	var out []docCommand
	lines := strings.Split(block, "\n")
	for i := 0; i < len(lines); i++ {
		n := firstLine + i
		text := strings.TrimPrefix(lines[i], "$ ")
		for strings.HasSuffix(text, "\\") && i+1 < len(lines) {
			i++
			text += "\n" + lines[i]
		}
		if !strings.Contains(text, "epwindow") {
			continue
		}
		text = placeholder.ReplaceAllString(text, "PLACEHOLDER")
		text = optional.ReplaceAllString(text, "$1")
		prog, err := syntax.NewParser(syntax.KeepComments(false)).Parse(strings.NewReader(text), file)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: cannot read the command as a shell would: %v", file, n, err)
		}
		syntax.Walk(prog, func(node syntax.Node) bool {
			call, ok := node.(*syntax.CallExpr)
			if !ok {
				return true
			}
			words := make([]string, len(call.Args))
			for j, w := range call.Args {
				words[j] = wordText(w)
			}
			if argv := epwindowArgv(words); argv != nil {
				out = append(out, docCommand{where: fmt.Sprintf("%s:%d", file, n), argv: argv})
			}
			return true
		})
	}
	return out, nil
}

// epwindowArgv returns the command's argv with the program named
// "epwindow" when words run epwindow, else nil.
func epwindowArgv(words []string) []string {
	switch {
	case len(words) == 0:
		return nil
	case filepath.Base(words[0]) == "epwindow" || filepath.Base(words[0]) == "kubectl-epwindow":
		return append([]string{"epwindow"}, words[1:]...)
	case words[0] == "kubectl" && len(words) > 1 && words[1] == "epwindow":
		return append([]string{"epwindow"}, words[2:]...)
	}
	return nil
}

// wordText is a shell word as the program receives it; an expansion
// ($TG, $(…)) stays as its source text, which is all a parse needs.
func wordText(w *syntax.Word) string {
	var b strings.Builder
	var parts func([]syntax.WordPart)
	parts = func(ps []syntax.WordPart) {
		for _, p := range ps {
			switch p := p.(type) {
			case *syntax.Lit:
				b.WriteString(strings.ReplaceAll(p.Value, "\\\n", ""))
			case *syntax.SglQuoted:
				b.WriteString(p.Value)
			case *syntax.DblQuoted:
				parts(p.Parts)
			default:
				var s strings.Builder
				syntax.NewPrinter().Print(&s, p)
				b.WriteString(s.String())
			}
		}
	}
	parts(w.Parts)
	return b.String()
}

// Every exit code the README's and docs' exit-code tables list is one the
// code defines in exitcodes.go, every code defined there is in the
// README's table, and no cli.Exit or os.Exit in cmd/epwindow passes a
// bare number instead of one of those names.
func TestDocsExitCodes(t *testing.T) {
	defined := definedExitCodes(t)
	if len(defined) < 5 {
		t.Fatalf("found only %v in exitcodes.go", defined)
	}
	inReadme := map[int]bool{}
	for _, f := range docFiles(t) {
		codes, err := exitCodeTables(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range codes {
			if !slices.Contains(defined, c.code) {
				t.Errorf("%s lists exit code %d, which exitcodes.go does not define", c.where, c.code)
			}
			if filepath.Base(f) == "README.md" {
				inReadme[c.code] = true
			}
		}
	}
	for _, c := range defined {
		if !inReadme[c] {
			t.Errorf("exit code %d is defined in exitcodes.go but not in the README's table", c)
		}
	}
	for _, bad := range bareExitCodes(t) {
		t.Errorf("%s: an exit code as a bare number: use a name from exitcodes.go", bad)
	}
}

// definedExitCodes reads the exit* constants of exitcodes.go, the one list
// of the tool's exit codes.
func definedExitCodes(t *testing.T) []int {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "exitcodes.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []int
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, name := range v.Names {
				lit, ok := v.Values[i].(*ast.BasicLit)
				if !ok || !strings.HasPrefix(name.Name, "exit") {
					t.Fatalf("exitcodes.go: %s is not an exit code given as a number", name.Name)
				}
				n, _ := strconv.Atoi(lit.Value)
				codes = append(codes, n)
			}
		}
	}
	return codes
}

type docExitCode struct {
	where string
	code  int
}

var exitTableHead = regexp.MustCompile(`^\|\s*code\s*\|[^|]*\bmeaning\s*\|`)

// exitCodeTables returns the codes in the first column of every Markdown
// table headed "| code | … meaning |" (the README's, verify's).
func exitCodeTables(path string) ([]docExitCode, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []docExitCode
	inTable := false
	for i, line := range strings.Split(string(data), "\n") {
		switch {
		case exitTableHead.MatchString(line):
			inTable = true
		case inTable && strings.HasPrefix(line, "|"):
			cell := strings.TrimSpace(strings.Split(line, "|")[1])
			if strings.Trim(cell, ":-") == "" {
				continue // the alignment row
			}
			n, err := strconv.Atoi(cell)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: exit-code table row %q: not a number", path, i+1, cell)
			}
			out = append(out, docExitCode{fmt.Sprintf("%s:%d", filepath.Base(path), i+1), n})
		default:
			inTable = false
		}
	}
	return out, nil
}

// bareExitCodes finds cli.Exit(msg, N) and os.Exit(N) calls with a number
// literal in cmd/epwindow's non-test files.
func bareExitCodes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var bad []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Exit" || len(call.Args) == 0 {
				return true
			}
			if lit, ok := call.Args[len(call.Args)-1].(*ast.BasicLit); ok && lit.Kind == token.INT {
				bad = append(bad, fset.Position(call.Pos()).String())
			}
			return true
		})
	}
	return bad
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#+ (.*)$`)
	mdFenced  = regexp.MustCompile("(?s)```.*?```")
	notInSlug = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// Every relative link in the README and docs/ points at a file that
// exists and, with a #fragment, at a heading in it (GitHub's anchors:
// lower case, punctuation dropped, spaces as hyphens).
func TestDocsLinks(t *testing.T) {
	anchors := map[string]map[string]bool{}
	read := func(path string) (string, bool) {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", false
		}
		text := mdFenced.ReplaceAllString(string(data), "")
		if anchors[path] == nil {
			anchors[path] = map[string]bool{}
			for _, m := range mdHeading.FindAllStringSubmatch(text, -1) {
				slug := strings.ReplaceAll(notInSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
				anchors[path][slug] = true
			}
		}
		return text, true
	}
	links := 0
	for _, f := range docFiles(t) {
		text, _ := read(f)
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, frag, _ := strings.Cut(target, "#")
			path := f
			if file != "" {
				path = filepath.Join(filepath.Dir(f), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: no such file", f, target)
				continue
			}
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if _, ok := read(path); ok && !anchors[path][frag] {
				t.Errorf("%s: link %s: no such heading in %s", f, target, path)
			}
		}
	}
	if links < 10 {
		t.Errorf("found only %d relative links", links)
	}
}
