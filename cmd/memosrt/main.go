package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envTable lists every environment variable memosrt reads.
var envTable = [][2]string{
	{"MEMOSRT_DB", "default for --db (data directory)"},
	{"MEMOSRT_ENCRYPT_KEY_FILE", "default for --encrypt-key-file (hex AES key of the data directory)"},
	{"MEMOSRT_MODEL", "default for --model (GGUF file or Ollama model name)"},
	{"OLLAMA_MODELS", "Ollama's model store, where --model NAME[:TAG] is looked up; default ~/.ollama/models"},
	{"MEMOSRT_LIB_PATH", "directory of ggml backend modules (libggml-cuda.so); default <binary dir>/../lib/memosrt"},
	{"MEMOSRT_UPSTREAM_API_KEY", "API key serve --backend openai:URL sends upstream (Authorization: Bearer); default $OPENAI_API_KEY"},
	{"OPENAI_API_KEY", "the upstream API key when MEMOSRT_UPSTREAM_API_KEY is unset (serve --backend openai:URL)"},
	{"MEMOSRT_LOG", "log level on stderr: debug, info, warn (default), error"},
	{"MEMOSRT_FAILPOINT", "tests only: tiers-after-put makes serve exit after a tier job stored its pack, before it commits"},
}

const version = "0.1.0"

// usageTemplate is cobra's default usage template with one usage line
// (group commands say COMMAND in their Use) and, on the root command, the
// environment variables of envTable.
func usageTemplate() string {
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

// newRootCmd returns the command tree. Commands read their flags when they
// run; nothing is opened or created before a command's arguments and flags
// are checked.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "memosrt COMMAND",
		Short: "local-first LLM inference with tiered memory",
		Long: fmt.Sprintf("memosrt %s: local-first LLM inference with tiered memory\n\n"+
			"Shell completion: memosrt completion bash|zsh|fish|powershell (see memosrt completion bash --help).", version),
		SilenceUsage:          true,
		SilenceErrors:         true,
		DisableFlagsInUseLine: true,
		Args:                  subcommandArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help() // memosrt alone: the usage, exit 0
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error { return applyEnv(cmd) },
	}
	root.SetUsageTemplate(usageTemplate())
	root.SetFlagErrorFunc(flagError)
	root.Flags().SortFlags = false
	root.AddCommand(newMemCmd(), newKVCmd(), newRunCmd(), newBenchCmd(), newServeCmd(), newMCPCmd(),
		newLoraCmd(), newTiersCmd(), newKeysCmd(), newBackupCmd(), newRestoreCmd(), newCheckCmd(), newGenModelCmd(), newQuantizeCmd(), newCalibrateCmd(), newDevicesCmd(), newVersionCmd())
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			// a mistyped shell is an error, as a mistyped command
			c.Use, c.DisableFlagsInUseLine = "completion SHELL", true
			c.Args, c.RunE = subcommandArgs, func(*cobra.Command, []string) error { return nil }
		}
	}
	return root
}

// group returns a command that only holds subcommands: alone or with an
// unknown subcommand it is an error (exit 1), never its help.
func group(name, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:                   name + " COMMAND",
		Short:                 short,
		DisableFlagsInUseLine: true,
		Args:                  subcommandArgs,
		RunE:                  func(*cobra.Command, []string) error { return nil }, // subcommandArgs refused it
	}
	c.AddCommand(subs...)
	return c
}

// subcommandArgs refuses what is not one of cmd's subcommands (cobra
// reaches a group's own Args only then), and a group command alone.
func subcommandArgs(cmd *cobra.Command, args []string) error {
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

// noArgs is the Args of a command without positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%s takes no arguments, got %q", cmdName(cmd), args)
	}
	return nil
}

// exactArgs is the Args of a command taking n positional arguments, named
// in what ("one TEXT argument").
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s takes %s", cmdName(cmd), what)
		}
		return nil
	}
}

// cmdName is the command path without "memosrt ": "mem add".
func cmdName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// flagError puts pflag's parse errors in the user's words: the flag, the
// value given and what it wants. On a group command an unknown flag after
// an unknown subcommand reports the subcommand.
func flagError(cmd *cobra.Command, err error) error {
	if cmd.HasSubCommands() {
		if pos := cmd.Flags().Args(); len(pos) > 0 {
			if e := subcommandArgs(cmd, pos); e != nil {
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
	return fmt.Errorf("%s: %w (%s --help lists its flags)", cmdName(cmd), err, cmd.CommandPath())
}

// envAnnotation marks a flag whose default is an environment variable
// (envDefault); applyEnv sets it before the command runs, so help shows the
// variable's name, not its value.
const envAnnotation = "memosrt_env"

func envDefault(fs *pflag.FlagSet, flag, env string) {
	fs.SetAnnotation(flag, envAnnotation, []string{env})
}

// applyEnv gives each flag of cmd not on the command line its environment
// default.
func applyEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		env := f.Annotations[envAnnotation]
		if f.Changed || len(env) != 1 {
			return
		}
		if v := os.Getenv(env[0]); v != "" {
			if e := f.Value.Set(v); e != nil && err == nil {
				err = fmt.Errorf("%s=%q (the default of --%s): %w", env[0], v, f.Name, e)
			}
		}
	})
	return err
}

// check is one range check of a flag's value: ok false refuses it with
// "--FLAG VALUE: want WANT".
type check struct {
	flag string
	ok   bool
	want string
}

// checkFlags returns the first failed check.
func checkFlags(cmd *cobra.Command, cs ...check) error {
	for _, c := range cs {
		if !c.ok {
			return fmt.Errorf("--%s %s: want %s", c.flag, cmd.Flags().Lookup(c.flag).Value.String(), c.want)
		}
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "memosrt: %s\n", userMessage(err))
		os.Exit(1)
	}
}

// run runs the command line args (without the program name).
func run(ctx context.Context, args []string) error {
	root := newRootCmd()
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// pkgPrefixes are the package names that start the messages of our
// packages' errors (pebble style, "kvcache: ..."): the CLI speaks to a user,
// who knows none of them.
var pkgPrefixes = []string{"memosrt", "textmem", "kvcache", "runtime", "llama", "badger", "scheduler", "lora",
	"embed", "server", "ollamastore", "gguf", "grammar", "recall", "bench", "atomicfile"}

// userMessage is err's text without package prefixes (at the start or
// after ": ") and without a segment said twice in a row.
func userMessage(err error) string {
	parts := strings.Split(err.Error(), ": ")
	var out []string
	for _, p := range parts {
		if isPkg(p) {
			continue
		}
		if n := len(out); n > 0 && out[n-1] == p {
			continue
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return err.Error()
	}
	return strings.Join(out, ": ")
}

func isPkg(s string) bool {
	for _, p := range pkgPrefixes {
		if s == p {
			return true
		}
	}
	return false
}

func logger() *slog.Logger {
	lvl := slog.LevelWarn
	switch strings.ToLower(os.Getenv("MEMOSRT_LOG")) {
	case "debug":
		lvl = slog.LevelDebug
	case "info":
		lvl = slog.LevelInfo
	case "error":
		lvl = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

// libDir returns MEMOSRT_LIB_PATH or <binary dir>/../lib/memosrt.
func libDir() string {
	if d := os.Getenv("MEMOSRT_LIB_PATH"); d != "" {
		return d
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), "..", "lib", "memosrt")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress returns a load-progress printer for stderr when it is a terminal.
func progress(label string) func(float32) {
	if !isTerminal(os.Stderr) {
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
