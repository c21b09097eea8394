package server

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/testutil"
)

// nodeScript runs testdata/node/<script> against base with the official
// JavaScript clients pinned in testdata/node/package-lock.json (installed
// by npm ci) and decodes the JSON line it prints into out. Without node
// or npm the test is skipped, unless CI is set: CI installs them.
func nodeScript(t *testing.T, script, base string, out any) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "" {
				t.Skipf("%s not installed (apt-get install nodejs npm); CI runs this test", tool)
			}
			t.Fatalf("CI is set but %s is not installed: %v", tool, err)
		}
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "node"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := func(name string, args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
		}
		return b
	}
	run("npm", "ci", "--no-audit", "--no-fund", "--prefer-offline")
	b := run("node", script, base)
	if err := json.Unmarshal(bytes.TrimSpace(b), out); err != nil {
		t.Fatalf("%s printed %q: %v", script, b, err)
	}
}

// TestNodeClientsMultiCube is the three-cube assistant through ollama-js
// (alice) and openai-node (bob): the rendered prompt and the per-cube
// counts show a memory of each cube, bob's chat restores the shared
// cubes' prefix alice's turn stored, and only the users' cubes are
// written.
func TestNodeClientsMultiCube(t *testing.T) {
	e := newEnv(t, envConfig{})
	threeCubes(t, e)
	var got struct {
		Rendered string `json:"rendered"`
		Alice    struct {
			CubeMemories map[string]int `json:"cube_memories"`
			Cached       int            `json:"cached"`
			Done         bool           `json:"done"`
		} `json:"alice"`
		SharedPackTokens int `json:"shared_pack_tokens"`
		Bob              struct {
			CubeMemories map[string]int `json:"cube_memories"`
			Cached       int            `json:"cached"`
			Content      string         `json:"content"`
		} `json:"bob"`
	}
	nodeScript(t, "multicube.mjs", e.url(), &got)
	question := "Where can I get some tea"
	want := "You are a helpful assistant. What you remember about the user:\n- " + shopMem + "\n- " + assistantMem + "\n\nAlso relevant:\n- " + aliceMem + "\n" + question
	if got.Rendered != want {
		t.Fatalf("rendered\n%q, want\n%q", got.Rendered, want)
	}
	shared := sharedPrefixTokens(t, e, got.Rendered)
	if !got.Alice.Done || got.Alice.Cached != 0 || !mapsEqual(got.Alice.CubeMemories, map[string]int{"alice": 1, "shop": 1, "assistant-x": 1}) {
		t.Fatalf("alice (ollama-js): %+v", got.Alice)
	}
	if got.SharedPackTokens != shared {
		t.Fatalf("shared pack of %d tokens, the shared prefix is %d", got.SharedPackTokens, shared)
	}
	if got.Bob.Cached != shared || got.Bob.Content == "" || !mapsEqual(got.Bob.CubeMemories, map[string]int{"bob": 1, "shop": 1, "assistant-x": 1}) {
		t.Fatalf("bob (openai-node): %+v, shared prefix %d tokens", got.Bob, shared)
	}
	testutil.WaitFor(t, "turns written", func() bool {
		c := cubeCounts(t, e, "alice", "bob")
		return c["alice"] == 2 && c["bob"] == 2
	})
	if c := cubeCounts(t, e, "alice", "bob", "shop", "assistant-x"); !mapsEqual(c, map[string]int{"alice": 2, "bob": 2, "shop": 1, "assistant-x": 1}) {
		t.Fatalf("after: %v", c)
	}
}
