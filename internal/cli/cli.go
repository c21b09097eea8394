package cli

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// UsageTemplate is cobra's default usage template with one usage line
// (group commands say COMMAND in their Use) and, on the root command, the
// environment variables of envTable: each {name, what it is}.
func UsageTemplate(envTable [][2]string) string {
	var env strings.Builder
	for _, e := range envTable {
		fmt.Fprintf(&env, "\n  %-25s %s", e[0], e[1])
	}
	return `Usage:{{if .Runnable}}
  {{.UseLine}}{{else if .HasAvailableSubCommands}}
  {{.CommandPath}} COMMAND{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if not .HasParent}}

Environment:` + env.String() + `{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} COMMAND --help" for more information about a command.{{end}}
`
}

// Group returns a command that only holds subcommands: alone or with an
// unknown subcommand it is an error (exit 1), never its help.
func Group(name, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:                   name + " COMMAND",
		Short:                 short,
		DisableFlagsInUseLine: true,
		Args:                  SubcommandArgs,
		RunE:                  func(*cobra.Command, []string) error { return nil }, // SubcommandArgs refused it
	}
	c.AddCommand(subs...)
	return c
}

// SubcommandArgs refuses what is not one of cmd's subcommands (cobra
// reaches a group's own Args only then), and a group command alone.
func SubcommandArgs(cmd *cobra.Command, args []string) error {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	list := strings.Join(names, ", ")
	if len(args) == 0 {
		if !cmd.HasParent() {
			return nil
		}
		return fmt.Errorf("%s needs a command: %s (%s --help)", cmd.Name(), list, cmd.CommandPath())
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, set by its own (unexported) lookup only
	}
	what := cmd.Name() + " command"
	if !cmd.HasParent() {
		what, list = "command", "memosrt --help lists them"
	}
	msg := fmt.Sprintf("unknown %s %q (%s)", what, args[0], list)
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return errors.New(msg)
}

// NoArgs is the Args of a command without positional arguments.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%s takes no arguments, got %q", CmdName(cmd), args)
	}
	return nil
}

// ExactArgs is the Args of a command taking n positional arguments, named
// in what ("one TEXT argument").
func ExactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s takes %s", CmdName(cmd), what)
		}
		return nil
	}
}

// CmdName is the command path without "memosrt ": "mem add".
func CmdName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// FlagError puts pflag's parse errors in the user's words: the flag, the
// value given and what it wants. On a group command an unknown flag after
// an unknown subcommand reports the subcommand.
func FlagError(cmd *cobra.Command, err error) error {
	if cmd.HasSubCommands() {
		if pos := cmd.Flags().Args(); len(pos) > 0 {
			if e := SubcommandArgs(cmd, pos); e != nil {
				return e
			}
		}
	}
	var ive *pflag.InvalidValueError
	if errors.As(err, &ive) {
		f := ive.GetFlag()
		want := ""
		var ne *strconv.NumError
		switch cause := ive.Unwrap(); {
		case errors.As(cause, &ne) && errors.Is(ne.Err, strconv.ErrRange):
			want = "out of range"
		case strings.Contains(f.Value.Type(), "int"):
			want = "want an integer"
		case strings.HasPrefix(f.Value.Type(), "float"):
			want = "want a number"
		case f.Value.Type() == "duration":
			want = "want a duration such as 500ms, 10s or 5m"
		case f.Value.Type() == "bool":
			want = "want true or false"
		default:
			want = cause.Error()
		}
		return fmt.Errorf("--%s %q: %s", f.Name, ive.GetValue(), want)
	}
	return fmt.Errorf("%s: %w (%s --help lists its flags)", CmdName(cmd), err, cmd.CommandPath())
}

// IsTerminal reports whether f is a character device (a terminal).
// IsTerminal reports whether f is a character device (a terminal).
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Progress returns a load-progress printer for stderr when it is a terminal.
func Progress(label string) func(float32) {
	if !IsTerminal(os.Stderr) {
		return nil
	}
	last := -1
	return func(f float32) {
		p := int(f * 100)
		if p == last {
			return
		}
		last = p
		fmt.Fprintf(os.Stderr, "\r%s %3d%%", label, p)
		if p >= 100 {
			fmt.Fprint(os.Stderr, "\r\033[K")
		}
	}
}
