// Command memosrt is a local-first LLM inference runtime with tiered memory.
//
//	memosrt mem add|ls|search|rm --db DIR --cube NAME ...
//	memosrt kv warm|ls --db DIR --model PATH --cube NAME
//	memosrt run --db DIR --model PATH --cube NAME [flags] PROMPT
//	memosrt mcp --db DIR [--model PATH] [--cube NAME]
//	memosrt bench ttft|recall ...
//	memosrt gen-model --preset 1b --out PATH
//	memosrt version | devices
//
// Environment variables are read here only and passed down; see envTable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// envTable lists every environment variable memosrt reads.
var envTable = [][2]string{
	{"MEMOSRT_DB", "default for --db (data directory)"},
	{"MEMOSRT_ENCRYPT_KEY_FILE", "default for --encrypt-key-file (hex AES key of the data directory)"},
	{"MEMOSRT_MODEL", "default for --model (GGUF file or Ollama model name)"},
	{"OLLAMA_MODELS", "Ollama's model store, where --model NAME[:TAG] is looked up; default ~/.ollama/models"},
	{"MEMOSRT_LIB_PATH", "directory of ggml backend modules (libggml-cuda.so); default <binary dir>/../lib/memosrt"},
	{"MEMOSRT_LOG", "log level on stderr: debug, info, warn (default), error"},
	{"MEMOSRT_FAILPOINT", "tests only: tiers-after-put makes serve exit after a tier job stored its pack, before it commits"},
}

const version = "0.1.0"

type command struct {
	name  string
	usage string
	run   func(ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{"mem", "mem add|ls|search|rm --db DIR --cube NAME [TEXT|QUERY|ID]", cmdMem},
		{"kv", "kv warm|ls --db DIR [--model PATH|NAME[:TAG] --cube NAME]", cmdKV},
		{"run", "run --db DIR --model PATH|NAME[:TAG] --cube NAME [--temperature T] [--seed N] [--num-predict N] [--no-cache] [--lora NAME[:SCALE]] [--json] PROMPT", cmdRun},
		{"bench", "bench ttft --model PATH|NAME[:TAG] --prefix N[,N...] [--query Q] [--threads T] [--ngl N] [--json]\n  bench recall --locomo FILE [--k 5,10,25] [--json]", cmdBench},
		{"serve", serveUsage, cmdServe},
		{"mcp", mcpUsage, cmdMCP},
		{"lora", loraUsage, cmdLora},
		{"tiers", tiersUsage, cmdTiers},
		{"gen-model", "gen-model --preset 1b|8b|tiny --out PATH [--seed N]", cmdGenModel},
		{"devices", "devices: list the compute devices ggml found", cmdDevices},
		{"version", "version: print the version and devices", cmdVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "memosrt %s: local-first LLM inference with tiered memory\n\nUsage:\n", version)
	for _, c := range commands() {
		fmt.Fprintf(w, "  memosrt %s\n", c.usage)
	}
	fmt.Fprintf(w, "\nEnvironment:\n")
	for _, e := range envTable {
		fmt.Fprintf(w, "  %-18s %s\n", e[0], e[1])
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		// Errors from the memosrt package already carry its name.
		fmt.Fprintf(os.Stderr, "memosrt: %s\n", strings.TrimPrefix(err.Error(), "memosrt: "))
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(os.Stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			if len(args) == 2 && (args[1] == "-h" || args[1] == "--help" || args[1] == "help") {
				// a command's own help: its usage line, exit 0 (a leaf
				// command's flags: memosrt CMD SUB --help)
				fmt.Printf("Usage:\n  memosrt %s\n", c.usage)
				return nil
			}
			return c.run(ctx, args[1:])
		}
	}
	usage(os.Stderr)
	return fmt.Errorf("unknown command %q", args[0])
}

// parse parses flags anywhere among args and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(os.Stdout)
				fs.PrintDefaults()
			}
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
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
