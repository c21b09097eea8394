package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/internal/testmodels"
)

// TestCLIHostileInput: oversized, invalid and overlong inputs end with one
// clear error line and exit status 1, never a crash (a signal or a Go
// panic trace).
func TestCLIHostileInput(t *testing.T) {
	db := t.TempDir()
	model := testmodels.Stories(t)
	must(t, "mem", "add", "--db", db, "--cube", "c", "Lily has a dog.")
	long := strings.Repeat("the cat sat on the mat. ", 40) // about 240 tokens
	missing := filepath.Join(t.TempDir(), "typo")
	notGGUF := filepath.Join(t.TempDir(), "notes.gguf")
	if err := os.WriteFile(notGGUF, []byte("not a model\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"text-over-64KiB", []string{"mem", "add", "--db", db, "--cube", "c", strings.Repeat("a ", 33<<10)}, "text too large"},
		{"invalid-utf8", []string{"mem", "add", "--db", db, "--cube", "c", "bad \xff byte"}, "invalid utf-8"},
		{"bad-cube", []string{"mem", "add", "--db", db, "--cube", "../etc", "x"}, `--cube "../etc": bad cube name`},
		{"prompt-over-n_ctx", []string{"run", "--db", db, "--model", model, "--cube", "c", "--ctx", "128", "--num-predict", "4", long}, "tokens, context is"},
		{"num-predict-below-2", []string{"run", "--db", db, "--model", model, "--num-predict", "-3", "hi"}, "--num-predict -3: want -2 or more"},
		{"negative-threads", []string{"run", "--db", db, "--model", model, "--threads", "-3", "hi"}, "--threads -3: want 0 (all CPUs) to 512"},
		{"missing-model", []string{"run", "--db", missing, "--model", missing + ".gguf", "hi"}, "model: stat " + missing + ".gguf: no such file"},
		{"ls-missing-dir", []string{"mem", "ls", "--db", missing, "--cube", "c"}, "data directory: stat " + missing},
		{"search-missing-dir", []string{"mem", "search", "--db", missing, "--cube", "c", "dog"}, "data directory: stat " + missing},
		{"kv-ls-missing-dir", []string{"kv", "ls", "--db", missing}, "data directory: stat " + missing},
		{"tiers-missing-dir", []string{"tiers", "--db", missing, "--cube", "c"}, "data directory: stat " + missing},
		{"tiers-no-cube", []string{"tiers", "--db", db}, "--cube is required"},
		{"serve-not-gguf", []string{"serve", "--db", missing, "--model", notGGUF, "--addr", "127.0.0.1:0"}, "is not a GGUF file (bad magic)"},
		{"serve-vocab-only", []string{"serve", "--db", missing, "--model", filepath.Join(filepath.Dir(model), "ggml-vocab-llama-spm.gguf"), "--addr", "127.0.0.1:0"}, "is vocab-only"},
		{"negative-temperature", []string{"run", "--db", db, "--model", model, "--temperature", "-1", "hi"}, "--temperature -1: want 0 (greedy) or more"},
		{"num-predict-not-a-number", []string{"run", "--db", db, "--model", model, "--num-predict", "many", "hi"}, `--num-predict "many": want an integer`},
		{"ctx-below-8", []string{"run", "--db", missing, "--model", model, "--ctx", "4", "hi"}, "--ctx 4: want 8 or more tokens"},
		{"unknown-flag", []string{"mem", "ls", "--db", missing, "--cube", "c", "--kind", "fact"}, "mem ls: unknown flag: --kind"},
		{"stray-argument", []string{"mem", "ls", "--db", missing, "--cube", "c", "extra"}, `mem ls takes no arguments, got ["extra"]`},
		{"bad-cube-new-dir", []string{"mem", "add", "--db", missing, "--cube", "a/b", "x"}, "bad cube name"},
		{"one-prefix", []string{"run", "--db", db, "--model", model, "--cube", "ghost", "hi"}, "memosrt: unknown cube"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, tc.args...)
			if err == nil {
				t.Fatalf("no error:\n%.300s", out)
			}
			if code := exitCode(err); code != 1 {
				t.Fatalf("exit %v, want status 1:\n%.2000s", err, out)
			}
			last := strings.TrimSpace(out)
			last = last[strings.LastIndex(last, "\n")+1:]
			if !strings.HasPrefix(last, "memosrt: ") || !strings.Contains(last, tc.want) || strings.Contains(out, "goroutine ") ||
				strings.HasPrefix(last, "memosrt: memosrt: ") || hasPkgPrefix(last) {
				t.Fatalf("last line %q, want memosrt: ...%s...", last, tc.want)
			}
		})
	}
	if out := must(t, "mem", "ls", "--db", db, "--cube", "c"); strings.Count(out, "\n") != 2 {
		t.Fatalf("refused inputs were stored:\n%s", out)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("a command on a missing directory created it: %v", err)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// hasPkgPrefix reports a package name leading an error segment ("textmem: ...").
func hasPkgPrefix(line string) bool {
	for _, seg := range strings.Split(strings.TrimPrefix(line, "memosrt: "), ": ") {
		if cli.IsPkg(seg) {
			return true
		}
	}
	return false
}

// TestCtxCappedSaidOnce: a --ctx above the model's training context is
// loaded capped, and stderr says so in one line.
func TestCtxCappedSaidOnce(t *testing.T) {
	cmd := exec.Command(binPath, "run", "--model", testmodels.Stories(t), "--ctx", "100000", "--num-predict", "2", "--json", "hi")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr.String())
	}
	if got := stderr.String(); got != "memosrt: --ctx 100000 capped at the model's training context, 2048 tokens\n" {
		t.Fatalf("stderr %q", got)
	}
}
