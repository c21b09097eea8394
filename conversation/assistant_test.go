package conversation

import (
	"context"
	"errors"
	"testing"

	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/textmem"
)

// TestAssistantRouting: the rule-based extraction (no model) writes the
// facts and preferences about the user to the user's cube and the
// procedure to the assistant's cube the turns name; undo removes both.
func TestAssistantRouting(t *testing.T) {
	ctx := context.Background()
	m, mem := openManager(t, Hooks{})
	turns := []convmem.Turn{
		{User: "I like green tea.", Assistant: "Noted.", AssistantCube: "assistant-x"},
		{User: "I live in Lyon.", AssistantCube: "assistant-x"},
		{User: "To brew it I boil water first, then steep the leaves for three minutes.", AssistantCube: "assistant-x"},
	}
	j, _, err := m.AddTurns(ctx, "alice", turns, true)
	if err != nil {
		t.Fatal(err)
	}
	j = waitDone(t, m, "alice", j.ID)
	if j.State != convmem.JobDone || j.By != "extractive" || len(j.Results) != 3 {
		t.Fatalf("job %+v", j)
	}
	kinds := func(cube string) map[string]int {
		ms, err := mem.List(ctx, cube)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, x := range ms {
			if x.Source == "extract:"+j.ID {
				out[x.Kind]++
			}
		}
		return out
	}
	if got := kinds("alice"); len(got) != 2 || got[convmem.TypePreference] != 1 || got[convmem.TypeFact] != 1 {
		t.Errorf("alice's extracted memories %v, want one preference, one fact", got)
	}
	if got := kinds("assistant-x"); len(got) != 1 || got[convmem.TypeProcedure] != 1 {
		t.Errorf("assistant-x's extracted memories %v, want one procedure", got)
	}
	var routed []convmem.JobResult
	for _, r := range j.Results {
		if r.Cube != "" {
			routed = append(routed, r)
		}
	}
	if len(routed) != 1 || routed[0].Cube != "assistant-x" || routed[0].Type != convmem.TypeProcedure {
		t.Fatalf("routed results %+v", routed)
	}
	if _, err := m.UndoJob(ctx, "alice", j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Get(ctx, "assistant-x", routed[0].MemoryID); !errors.Is(err, textmem.ErrNotFound) {
		t.Errorf("routed memory after undo: %v", err)
	}
	if got := kinds("alice"); len(got) != 0 {
		t.Errorf("alice after undo: %v", got)
	}
}

func TestRoute(t *testing.T) {
	for _, c := range []struct{ typ, assistant, want string }{
		{convmem.TypeProcedure, "assistant-x", "assistant-x"},
		{convmem.TypeProcedure, "", "alice"},
		{convmem.TypeFact, "assistant-x", "alice"},
		{convmem.TypePreference, "assistant-x", "alice"},
		{convmem.TypeEvent, "assistant-x", "alice"},
		{convmem.TypeOpinion, "assistant-x", "alice"},
	} {
		if got := convmem.Route(c.typ, "alice", c.assistant); got != c.want {
			t.Errorf("Route(%q, alice, %q) = %q, want %q", c.typ, c.assistant, got, c.want)
		}
	}
}
