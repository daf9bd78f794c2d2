package main

import (
	"path/filepath"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"
)

// pluginFile is the file name kubectl looks for to run `kubectl epwindow`:
// a kubectl plugin is any executable kubectl-NAME on the PATH.
const pluginFile = "kubectl-epwindow"

// appName is what help and usage call the tool: "kubectl epwindow" when
// started as the kubectl plugin (kubectl executes the plugin file, so
// argv[0] ends in kubectl-epwindow, also through make install's symlink),
// else "epwindow".
func appName(argv0 string) string {
	if strings.TrimSuffix(filepath.Base(argv0), ".exe") == pluginFile {
		return "kubectl epwindow"
	}
	return "epwindow"
}

// renameExamples makes the examples and descriptions say name where they
// say "epwindow SUBCOMMAND", so that `kubectl epwindow measure --help`
// shows commands that work as typed.
func renameExamples(cmds []*cli.Command, name string) {
	if name == "epwindow" {
		return
	}
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = regexp.QuoteMeta(c.Name)
	}
	re := regexp.MustCompile(`(^|[\s"'(|])epwindow (` + strings.Join(names, "|") + `)\b`)
	for _, c := range cmds {
		c.UsageText = re.ReplaceAllString(c.UsageText, "${1}"+name+" $2")
		c.Description = re.ReplaceAllString(c.Description, "${1}"+name+" $2")
	}
}
