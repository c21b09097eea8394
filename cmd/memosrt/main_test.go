package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/internal/testutil"
)

var binPath string

// TestMain builds the memosrt binary once for the tests.
func TestMain(m *testing.M) { testutil.RunWithMemosrt(m, &binPath) }

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

func must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("memosrt %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func runJSONOut(t *testing.T, args ...string) runJSON {
	t.Helper()
	var r runJSON
	out := must(t, args...)
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("bad JSON %q: %v", out, err)
	}
	return r
}

func TestWarmThenRunAcrossProcesses(t *testing.T) {
	db := t.TempDir()
	model := testmodels.Stories(t)
	for _, s := range []string{"Lily has a cat named Kitty.", "Kitty likes to sleep in the sun.", "Lily's brother is Ben."} {
		must(t, "mem", "add", "--db", db, "--cube", "lily", s)
	}
	ls := must(t, "mem", "ls", "--db", db, "--cube", "lily")
	if strings.Count(ls, "\n") != 4 || !strings.Contains(ls, "Kitty likes to sleep") {
		t.Fatalf("mem ls:\n%s", ls)
	}
	if out := must(t, "mem", "search", "--db", db, "--cube", "lily", "brother"); !strings.Contains(out, "Ben") {
		t.Fatalf("mem search:\n%s", out)
	}
	must(t, "kv", "warm", "--db", db, "--model", model, "--cube", "lily")
	// each run is a new process: the pack comes from Badger
	warm := runJSONOut(t, "run", "--db", db, "--model", model, "--cube", "lily", "--num-predict", "40", "--json", "Once upon a time")
	cold := runJSONOut(t, "run", "--db", db, "--model", model, "--cube", "lily", "--num-predict", "40", "--no-cache", "--json", "Once upon a time")
	if warm.CachedTokens == 0 || cold.CachedTokens != 0 || warm.PromptTokens != cold.PromptTokens {
		t.Fatalf("cached tokens: warm %d, cold %d", warm.CachedTokens, cold.CachedTokens)
	}
	if warm.Response != cold.Response || warm.Response == "" {
		t.Fatalf("warm %q\ncold %q", warm.Response, cold.Response)
	}
	if warm.EvalTokens != 40 || warm.TTFTms <= 0 || warm.EvalMs <= 0 {
		t.Fatalf("stats: %+v", warm)
	}
	// pinned resident: run loads one sequence (no resident level: a
	// resident pack is a server's), so the pack is restored into the
	// request's sequence; the output is still the cold one
	must(t, "kv", "warm", "--db", db, "--model", model, "--cube", "lily", "--resident")
	res := runJSONOut(t, "run", "--db", db, "--model", model, "--cube", "lily", "--num-predict", "40", "--json", "Once upon a time")
	if res.CacheSource != "restored" || res.CachedTokens != warm.CachedTokens || res.Response != cold.Response {
		t.Fatalf("resident: source %q, cached %d (want %d), %q; cold %q", res.CacheSource, res.CachedTokens, warm.CachedTokens, res.Response, cold.Response)
	}
	// rm one memory: the pack changes, the old one is no longer a prefix
	id := strings.Fields(strings.Split(ls, "\n")[1])[0]
	must(t, "mem", "rm", "--db", db, "--cube", "lily", id)
	after := runJSONOut(t, "run", "--db", db, "--model", model, "--cube", "lily", "--num-predict", "8", "--json", "Once upon a time")
	if after.PackMemories != 2 {
		t.Fatalf("pack memories after rm: %d", after.PackMemories)
	}
}

func TestCLIErrors(t *testing.T) {
	db := t.TempDir()
	cases := [][]string{
		{"mem", "add", "--db", db, "--cube", "c", "   "},
		{"mem", "add", "--db", db, "TEXT"},
		{"run", "--db", db, "--cube", "c", "hi"},
		{"run", "--db", db, "--model", "/nonexistent.gguf", "--cube", "c", "hi"},
		{"bench", "ttft", "--model", "x", "--prefix", "1,a"},
		{"nosuch"},
	}
	for _, args := range cases {
		out, err := runCLI(t, args...)
		if err == nil {
			t.Errorf("%v: no error", args)
			continue
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		last := lines[len(lines)-1]
		if !strings.HasPrefix(last, "memosrt: ") {
			t.Errorf("%v: last line %q", args, last)
		}
	}
}

// TestRunLoRA: an adapter that is not registered is refused by name; once
// it is registered, --lora applies it in a new process, --lora none and the
// cube default (none set) do not.
func TestRunLoRA(t *testing.T) {
	db := t.TempDir()
	model := testmodels.Stories(t)
	run := func(extra ...string) runJSON {
		args := append([]string{"run", "--db", db, "--model", model, "--num-predict", "24", "--json"}, extra...)
		return runJSONOut(t, append(args, "Once upon a time")...)
	}
	base := run()
	file := filepath.Join(t.TempDir(), "a.gguf")
	must(t, "lora", "gen", "--model", model, "--out", file, "--std", "0.5", "--seed", "7")
	if out, err := runCLI(t, "run", "--db", db, "--model", model, "--lora", "story", "--json", "x"); err == nil || !strings.Contains(out, "story") {
		t.Fatalf("unregistered adapter: err %v, output %q", err, out)
	}
	must(t, "lora", "add", "--db", db, "--model", model, "story", file)
	with := run("--lora", "story")
	if with.Response == base.Response || with.Response == "" {
		t.Fatalf("adapter did not change the output: %q", with.Response)
	}
	if again := run("--lora", "story"); again.Response != with.Response {
		t.Fatalf("same adapter, different output:\n%q\n%q", with.Response, again.Response)
	}
	if none := run("--lora", "none"); none.Response != base.Response {
		t.Fatalf("--lora none: %q, want %q", none.Response, base.Response)
	}
	if def := run(); def.Response != base.Response {
		t.Fatalf("no default adapter: %q, want %q", def.Response, base.Response)
	}
}

// TestRunFormat: --format makes the output a schema-valid document (inline
// and @FILE), and a schema outside the supported subset is an error.
func TestRunFormat(t *testing.T) {
	db := t.TempDir()
	model := testmodels.Stories(t)
	schema := `{"type":"object","properties":{"name":{"enum":["Lily","Tom"]},"age":{"type":"integer"}},"required":["name","age"]}`
	file := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(file, []byte(schema), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{schema, "@" + file} {
		r := runJSONOut(t, "run", "--db", db, "--model", model, "--num-predict", "128", "--format", f, "--json", "Once upon a time")
		var doc struct {
			Name string `json:"name"`
			Age  *int   `json:"age"`
		}
		if err := json.Unmarshal([]byte(r.Response), &doc); err != nil || r.DoneReason != "stop" || doc.Name != "Lily" && doc.Name != "Tom" || doc.Age == nil {
			t.Fatalf("--format %.10s: %q (%s): %v", f, r.Response, r.DoneReason, err)
		}
	}
	if out, err := runCLI(t, "run", "--db", db, "--model", model, "--format", `{"type":"string","pattern":"x"}`, "x"); err == nil || !strings.Contains(out, "pattern") {
		t.Fatalf("unsupported schema: %v %q", err, out)
	}
}

// `memosrt --help` and `memosrt CMD [SUB] --help` exit 0 with a usage line
// that names the command, and create nothing.
func TestHelpEverywhere(t *testing.T) {
	dir := t.TempDir()
	if out := must(t, "--help"); !strings.HasPrefix(out, "memosrt ") || !strings.Contains(out, "Usage:") {
		t.Fatalf("memosrt --help:\n%s", out)
	}
	for _, path := range commandPaths() {
		out := must(t, append(path, "--help")...)
		if !strings.Contains(out, "Usage:\n  memosrt "+strings.Join(path, " ")) {
			t.Errorf("memosrt %s --help:\n%s", strings.Join(path, " "), out)
		}
	}
	for _, args := range [][]string{{"mem", "ls", "--help"}, {"kv", "ls", "--help"}, {"run", "--help"}, {"serve", "--help"}, {"mcp", "--help"}} {
		cmd := append(args, "--db", filepath.Join(dir, "x"))
		if out := must(t, cmd...); !strings.Contains(out, "--db DIR") {
			t.Errorf("memosrt %v:\n%s", args, out)
		}
	}
	// a mistyped command or subcommand fails (exit 1) before anything is
	// created, whatever its flags
	for _, args := range [][]string{{"mem", "addd", "--db", filepath.Join(dir, "x")}, {"memm", "add", "--db", filepath.Join(dir, "x")},
		{"kv", "--db", filepath.Join(dir, "x"), "lss"}, {"mem"}, {"completion", "bashh"}} {
		out, err := runCLI(t, args...)
		if code := exitCode(err); code != 1 || !strings.HasPrefix(out, "memosrt: ") || strings.Count(out, "\n") != 1 {
			t.Errorf("memosrt %v: exit %d, output %q; want 1 and one line", args, code, out)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("help created %v", ents)
	}
}

// commandPaths lists every command and subcommand of the tree, as the
// words that name it: [mem] [mem add] ... (hidden ones left out).
func commandPaths() [][]string {
	var out [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			if sub.Hidden {
				continue
			}
			p := append(slices.Clone(path), sub.Name())
			out = append(out, p)
			walk(sub, p)
		}
	}
	walk(newRootCmd(), nil)
	return out
}

// Flags may come before, between or after the positional arguments, and
// their environment defaults apply when they are not given.
func TestFlagsAnywhere(t *testing.T) {
	db := t.TempDir()
	must(t, "mem", "add", "--db", db, "--cube", "c", "first")
	must(t, "mem", "add", "second", "--db", db, "--cube", "c")
	must(t, "mem", "add", "--db", db, "third", "--cube=c", "--tags", "a,b")
	must(t, "mem", "add", "--db", db, "--cube", "c", "--", "--fourth")
	cmd := exec.Command(binPath, "mem", "ls", "--cube", "c")
	cmd.Env = append(os.Environ(), "MEMOSRT_DB="+db)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mem ls with MEMOSRT_DB: %v", err)
	}
	for _, s := range []string{"first", "second", "third", "--fourth"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("mem ls lacks %q:\n%s", s, out)
		}
	}
}
