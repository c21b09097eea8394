package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/internal/testutil"
)

// startMCP runs `memosrt mcp` with args and connects the SDK's client to
// it over stdio; stderr is collected for failure messages.
func startMCP(t *testing.T, args ...string) (*mcp.ClientSession, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"mcp"}, args...)...)
	testutil.DieWithParent(cmd)
	cmd.Env = append(os.Environ(), "MEMOSRT_MODEL=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "memosrt-test", Version: "0"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to memosrt mcp: %v\n%s", err, stderr.String())
	}
	return cs, &stderr
}

// mcpTool calls a tool; structured content, when out is not nil and the
// call succeeded, is decoded into it. It returns the text content.
func mcpTool(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", tool, err)
	}
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	if out != nil && !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decoding %s: %v", tool, b, err)
		}
	}
	return strings.Join(text, "\n"), res.IsError
}

// `memosrt mcp` over stdio: add, search (finds the added id), chat with
// the model, in the --cube default cube; closing stdin ends the process
// with exit 0 and the memory stays in the data directory.
func TestMCPStdio(t *testing.T) {
	db := t.TempDir()
	cs, stderr := startMCP(t, "--db", db, "--model", testmodels.Stories(t), "--cube", "c", "--ctx", "1024", "--threads", "2")
	var added struct{ ID, Text string }
	if text, isErr := mcpTool(t, cs, "add_memory", map[string]any{"text": "Lily has a dog named Max."}, &added); isErr || added.ID == "" {
		t.Fatalf("add_memory: %q\n%s", text, stderr)
	}
	var found struct {
		Hits []struct {
			ID    string
			Score float64
		}
	}
	if text, isErr := mcpTool(t, cs, "search_memory", map[string]any{"query": "dog"}, &found); isErr || len(found.Hits) == 0 || found.Hits[0].ID != added.ID {
		t.Fatalf("search_memory: %q %+v, want id %s", text, found, added.ID)
	}
	var reply struct {
		Reply      string
		EvalTokens int `json:"eval_tokens"`
	}
	text, isErr := mcpTool(t, cs, "chat", map[string]any{"message": "Where does Max run?", "num_predict": 8}, &reply)
	if isErr || reply.Reply == "" || text != reply.Reply || reply.EvalTokens == 0 {
		t.Fatalf("chat: %q %+v\n%s", text, reply, stderr)
	}
	if text, isErr := mcpTool(t, cs, "list_memories", map[string]any{"cube": "other"}, nil); !isErr || !strings.Contains(text, "unknown cube") {
		t.Fatalf("list_memories of a missing cube: %v %q", isErr, text)
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("memosrt mcp after stdin closed: %v\n%s", err, stderr)
	}
	if out := must(t, "mem", "ls", "--db", db, "--cube", "c"); !strings.Contains(out, "Lily has a dog named Max.") {
		t.Fatalf("mem ls after mcp:\n%s", out)
	}
}

// Without --model the memory tools work and chat is a tool error.
func TestMCPStdioNoModel(t *testing.T) {
	cs, stderr := startMCP(t, "--db", t.TempDir())
	defer cs.Close()
	if text, isErr := mcpTool(t, cs, "add_memory", map[string]any{"cube": "c", "text": "Tom has a kite."}, nil); isErr {
		t.Fatalf("add_memory: %q\n%s", text, stderr)
	}
	if text, isErr := mcpTool(t, cs, "get_profile", map[string]any{"cube": "c"}, nil); isErr || !strings.Contains(text, "Tom has a kite.") {
		t.Fatalf("get_profile: %q", text)
	}
	if text, isErr := mcpTool(t, cs, "chat", map[string]any{"cube": "c", "message": "Hi"}, nil); !isErr || !strings.Contains(text, "model") {
		t.Fatalf("chat without a model: %v %q", isErr, text)
	}
	if text, isErr := mcpTool(t, cs, "list_memories", nil, nil); !isErr || !strings.Contains(text, "no cube") {
		t.Fatalf("list_memories without --cube or a cube argument: %v %q", isErr, text)
	}
}
