package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
)

// The shell completion scripts. Both ask
// the binary itself what may follow the words typed so far, by running
// them with urfave/cli's --generate-bash-completion appended, so they need
// no change when a subcommand or flag is added. What it prints is split
// into flags (offered for a word that starts with -) and the rest
// (subcommands, completion's shell names); with nothing to offer, as for a
// flag's value or lint's files, the shell completes file names.
const (
	bashCompletion = `# bash completion for epwindow. Load it with
#   source <(epwindow completion bash)
# or save it as /etc/bash_completion.d/epwindow.
_epwindow() {
	local line=${COMP_LINE:0:COMP_POINT} cur=
	local -a words
	read -ra words <<<"$line"
	if [[ $line != *[[:space:]] && ${#words[@]} -gt 1 ]]; then
		cur=${words[${#words[@]}-1]}
		unset 'words[${#words[@]}-1]'
	fi
	local IFS=$'\n' offer
	local -a flags=() others=()
	for offer in $("${words[@]}" --generate-bash-completion 2>/dev/null); do
		if [[ $offer == -* ]]; then
			flags+=("$offer")
		else
			others+=("$offer")
		fi
	done
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "${flags[*]}" -- "$cur"))
	elif ((${#others[@]})); then
		COMPREPLY=($(compgen -W "${others[*]}" -- "$cur"))
	else
		COMPREPLY=()
	fi
}
complete -o default -F _epwindow epwindow kubectl-epwindow
`
	zshCompletion = `#compdef epwindow kubectl-epwindow
# zsh completion for epwindow. Load it with
#   source <(epwindow completion zsh)
# or save it as _epwindow in a directory of $fpath.
_epwindow() {
	local -a offers flags others
	offers=("${(@f)$(${(Q)words[1,CURRENT-1]} --generate-bash-completion 2>/dev/null)}")
	flags=(${(M)offers:#-*})
	others=(${offers:#-*})
	if [[ $PREFIX == -* ]]; then
		compadd -a flags
	elif (( ${#others} )); then
		compadd -a others
	else
		_files
	fi
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
	_epwindow "$@"
else
	(( $+functions[compdef] )) || { autoload -Uz compinit && compinit; }
	compdef _epwindow epwindow kubectl-epwindow
fi
`
)

// completionScript is the script for shell, if there is one.
func completionScript(shell string) (string, bool) {
	switch shell {
	case "bash":
		return bashCompletion, true
	case "zsh":
		return zshCompletion, true
	}
	return "", false
}

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the shell completion script for bash or zsh",
		ArgsUsage: "bash|zsh",
		UsageText: `source <(epwindow completion bash)                    # this shell; or add the line to ~/.bashrc
   epwindow completion bash > /etc/bash_completion.d/epwindow
   source <(epwindow completion zsh)                     # or add the line to ~/.zshrc`,
		Description: `The script completes subcommands, flags and the shell names here by asking the epwindow
binary on the PATH (urfave/cli's --generate-bash-completion), and file names elsewhere.`,
		BashComplete: func(c *cli.Context) {
			fmt.Fprintln(c.App.Writer, "bash\nzsh")
		},
		OnUsageError: usageError("completion"),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("epwindow completion: name one shell: bash or zsh", exitUsage)
			}
			script, ok := completionScript(c.Args().First())
			if !ok {
				return cli.Exit(fmt.Sprintf("epwindow completion: unknown shell %q: want bash or zsh", c.Args().First()), exitUsage)
			}
			_, err := io.WriteString(c.App.Writer, script)
			return err
		},
	}
}

// completer prints, one per line, what may follow the words typed so far:
// the visible subcommands and flags that list returns (read when
// completing, after urfave/cli has added --help), but the help subcommand
// urfave/cli gives every command (--help says the same). urfave/cli's
// default reads os.Args to tell a flag from a subcommand; the scripts do
// that.
func completer(list func() ([]*cli.Command, []cli.Flag)) cli.BashCompleteFunc {
	return func(c *cli.Context) {
		cmds, flags := list()
		for _, sc := range cmds {
			if !sc.Hidden && sc.Name != "help" {
				fmt.Fprintln(c.App.Writer, sc.Name)
			}
		}
		for _, f := range flags {
			if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
				continue
			}
			for _, n := range f.Names() {
				dashes := "--"
				if len(n) == 1 {
					dashes = "-"
				}
				fmt.Fprintln(c.App.Writer, dashes+n)
			}
		}
	}
}
