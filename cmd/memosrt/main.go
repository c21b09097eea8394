package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/memosrt/memosrt/internal/cli"
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
	{"MEMOSRT_HUGEPAGES", "0: do not re-execute with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (2 MiB pages for the weights where the kernel's THP mode is madvise)"},
	{"MEMOSRT_FAILPOINT", "tests only: tiers-after-put makes serve exit after a tier job stored its pack, before it commits"},
}

const version = "0.1.0"

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
		Args:                  cli.SubcommandArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help() // memosrt alone: the usage, exit 0
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error { return applyEnv(cmd) },
	}
	root.SetUsageTemplate(cli.UsageTemplate(envTable))
	root.SetFlagErrorFunc(cli.FlagError)
	root.Flags().SortFlags = false
	root.AddCommand(newMemCmd(), newKVCmd(), newRunCmd(), newBenchCmd(), newServeCmd(), newMCPCmd(),
		newLoraCmd(), newTiersCmd(), newKeysCmd(), newBackupCmd(), newRestoreCmd(), newCheckCmd(), newGenModelCmd(), newQuantizeCmd(), newCalibrateCmd(), newDevicesCmd(), newVersionCmd())
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			// a mistyped shell is an error, as a mistyped command
			c.Use, c.DisableFlagsInUseLine = "completion SHELL", true
			c.Args, c.RunE = cli.SubcommandArgs, func(*cobra.Command, []string) error { return nil }
		}
	}
	return root
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
	hugePages()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "memosrt: %s\n", cli.UserMessage(err))
		os.Exit(1)
	}
}

// run runs the command line args (without the program name).
func run(ctx context.Context, args []string) error {
	root := newRootCmd()
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
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
