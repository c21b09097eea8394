package request

import (
	"errors"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/errkind"
)

// field returns the field a *errkind.FieldError names, "" for nil, and
// fails on any other error.
func field(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var fe *errkind.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("%v: not a *errkind.FieldError", err)
	}
	return fe.Field
}

func TestCheckOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		req  Request
		want string
	}{
		{"greedy", Request{}, ""},
		{"num_ctx", Request{NumCtx: -1}, "options.num_ctx"},
		{"top_k", Request{Sampling: Sampling{TopK: -1}}, "options.top_k"},
		{"temperature", Request{Sampling: Sampling{Temperature: 101}}, "options.temperature"},
		{"top_p", Request{Sampling: Sampling{TopP: 1.5}}, "options.top_p"},
		{"stops", Request{Stop: make([]string, MaxStops+1)}, "options.stop"},
		{"stop bytes", Request{Stop: []string{"a", strings.Repeat("x", MaxStopBytes+1)}}, "options.stop[1]"},
		{"stop at the limit", Request{Stop: []string{strings.Repeat("x", MaxStopBytes)}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := field(t, CheckOptions(&c.req)); got != c.want {
				t.Fatalf("field %q, want %q", got, c.want)
			}
		})
	}
}

func TestIDsAndModes(t *testing.T) {
	id := NewResponseID()
	if len(id) != len("resp_")+24 || field(t, CheckID(id)) != "" {
		t.Fatalf("NewResponseID %q", id)
	}
	for _, bad := range []string{"", "resp_", "x_1", "resp_a b", "resp_" + strings.Repeat("a", 60)} {
		if field(t, CheckID(bad)) != "id" {
			t.Errorf("CheckID(%q) passed", bad)
		}
	}
	for v, want := range map[string]RecordMode{"": RecordTurn, "user": RecordUser, "none": RecordNone} {
		if m, err := ParseRecordMode("record", v); err != nil || m != want {
			t.Errorf("ParseRecordMode(%q) = %q, %v", v, m, err)
		}
	}
	if _, err := ParseRecordMode("record", "all"); field(t, err) != "record" {
		t.Errorf("ParseRecordMode(all): %v", err)
	}
}

func TestTurns(t *testing.T) {
	got := Turns(&Request{System: "be brief", Prompt: "hi"})
	if len(got) != 2 || got[0] != (Message{Role: "system", Content: "be brief"}) || got[1] != (Message{Role: "user", Content: "hi"}) {
		t.Fatalf("completion turns %+v", got)
	}
	req := &Request{Messages: []Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}},
		Tools: []Tool{{Name: "f"}}}
	got = Turns(req)
	if !ToolsOn(req) || len(got) != 3 || got[0].Content != "s" || got[1].Role != "system" || !strings.Contains(got[1].Content, `"f"`) || got[2].Content != "u" {
		t.Fatalf("chat turns with tools %+v", got)
	}
	req.ToolChoice = ToolNone
	if ToolsOn(req) || len(Turns(req)) != 2 {
		t.Fatalf("tool_choice none: tools on %v, turns %+v", ToolsOn(req), Turns(req))
	}
	if PromptField(req) != "messages" || PromptField(&Request{}) != "prompt" {
		t.Fatal("PromptField")
	}
}

func TestReadCubes(t *testing.T) {
	got, err := ReadCubes(&Request{Cube: "me", ReadCubes: []string{"shop", "me", "kb", "shop"}})
	if err != nil || len(got) != 2 || got[0] != "shop" || got[1] != "kb" {
		t.Fatalf("ReadCubes = %q, %v", got, err)
	}
	many := make([]string, MaxCubes)
	for i := range many {
		many[i] = string(rune('a' + i))
	}
	for _, req := range []Request{{ReadCubes: []string{"shop"}}, {Cube: "me", ReadCubes: []string{"../x"}}, {Cube: "me", ReadCubes: many}} {
		if _, err := ReadCubes(&req); field(t, err) != "cubes" {
			t.Errorf("ReadCubes(%q, %q): %v", req.Cube, req.ReadCubes, err)
		}
	}
}
