package testutil

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// RunWithMemosrt is the body of a TestMain whose tests run the CLI: it
// builds cmd/memosrt into a temporary directory, stores the binary's path
// in *bin, runs the tests, removes the directory and exits with their code.
// A build failure prints the compiler output and exits 1.
func RunWithMemosrt(m *testing.M, bin *string) {
	dir, err := os.MkdirTemp("", "memosrt-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = filepath.Join(dir, "memosrt")
	out, err := exec.Command("go", "build", "-o", *bin, "github.com/memosrt/memosrt/cmd/memosrt").CombinedOutput()
	if err != nil {
		os.Stderr.Write(out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// FilesContaining returns the names of the files under dir whose first
// 8 MiB contain s (an open Badger value log is a sparse 2 GiB file written
// from its start), failing t on an I/O error.
func FilesContaining(t testing.TB, dir, s string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, 8<<20))
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(s)) {
			out = append(out, filepath.Base(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// WaitFor polls cond until it holds, failing t with what after a generous
// deadline (2 minutes): an event wait, not a timing assertion.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
