package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/help/*.txt from the binary's --help output")

// TestHelpGolden compares `memosrt --help` and `memosrt CMD [SUB] --help`
// of every command with testdata/help/<words joined by _>.txt (root.txt for
// the root). Rewrite them with `go test ./cmd/memosrt -run TestHelpGolden
// -update` (or UPDATE_GOLDEN=1) and review the diff. Flag defaults taken
// from the environment show as $VAR, so the output does not depend on it.
func TestHelpGolden(t *testing.T) {
	update := *updateGolden || os.Getenv("UPDATE_GOLDEN") == "1"
	dir := filepath.Join("testdata", "help")
	want := map[string]bool{}
	for _, path := range append([][]string{nil}, commandPaths()...) {
		name := "root"
		if len(path) > 0 {
			name = strings.Join(path, "_")
		}
		file := filepath.Join(dir, name+".txt")
		want[name+".txt"] = true
		t.Run(name, func(t *testing.T) {
			got := must(t, append(path, "--help")...)
			if update {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (go test ./cmd/memosrt -run TestHelpGolden -update writes it)", err)
			}
			if string(b) != got {
				t.Errorf("memosrt %s --help differs from %s (-update rewrites it):\n--- got\n%s\n--- want\n%s", strings.Join(path, " "), file, got, b)
			}
		})
	}
	// a golden file of a command that no longer exists
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !want[e.Name()] {
			if update {
				os.Remove(filepath.Join(dir, e.Name()))
				continue
			}
			t.Errorf("%s: no such command (-update removes it)", filepath.Join(dir, e.Name()))
		}
	}
}
