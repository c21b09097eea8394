package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

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
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"text-over-64KiB", []string{"mem", "add", "--db", db, "--cube", "c", strings.Repeat("a ", 33<<10)}, "textmem: text too large"},
		{"invalid-utf8", []string{"mem", "add", "--db", db, "--cube", "c", "bad \xff byte"}, "textmem: invalid utf-8"},
		{"bad-cube", []string{"mem", "add", "--db", db, "--cube", "../etc", "x"}, "textmem: bad cube name"},
		{"prompt-over-n_ctx", []string{"run", "--db", db, "--model", model, "--cube", "c", "--ctx", "128", "--num-predict", "4", long}, "tokens, context is"},
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
			if !strings.HasPrefix(last, "memosrt: ") || !strings.Contains(last, tc.want) || strings.Contains(out, "goroutine ") {
				t.Fatalf("last line %q, want memosrt: ...%s...", last, tc.want)
			}
		})
	}
	if out := must(t, "mem", "ls", "--db", db, "--cube", "c"); strings.Count(out, "\n") != 2 {
		t.Fatalf("refused inputs were stored:\n%s", out)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
