package memosrt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/textmem"
)

// TestReadCubesRefused: what Chat refuses of Request.ReadCubes, whatever
// the surface: read cubes without a cube to write, more than MaxCubes
// cubes, a bad name, an unknown cube. Repeated names are kept once.
func TestReadCubesRefused(t *testing.T) {
	ctx := context.Background()
	o := openOS(t, Options{Dir: t.TempDir(), NoSync: true, Model: testmodels.Stories(t)})
	var eight []string
	for i := range 8 {
		c := fmt.Sprintf("c%d", i)
		if _, err := o.AddMemory(ctx, c, textmem.Memory{Text: "Lily has a dog."}); err != nil {
			t.Fatal(err)
		}
		eight = append(eight, c)
	}
	if _, err := o.AddMemory(ctx, "alice", textmem.Memory{Text: "Alice likes tea."}); err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "user", Content: "Hello"}}
	for _, c := range []struct {
		name  string
		cube  string
		reads []string
		field string // a *FieldError naming it
		kind  error
	}{
		{"no cube", "", []string{"c0"}, "cubes", nil},
		{"nine cubes", "alice", eight, "cubes", nil},
		{"bad name", "alice", []string{"no/pe"}, "cubes", nil},
		{"unknown", "alice", []string{"nosuch"}, "", ErrUnknownCube},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := o.Chat(ctx, Request{Cube: c.cube, ReadCubes: c.reads, Messages: msgs, NumPredict: 1})
			var fe *FieldError
			switch {
			case c.kind != nil && !errors.Is(err, c.kind):
				t.Fatalf("err %v, want %v", err, c.kind)
			case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
				t.Fatalf("err %v, want a *FieldError on %s", err, c.field)
			}
		})
	}
	// seven read cubes and repeats (kept once): retrieval's five best of
	// equal scores come in the order the cubes were named
	res, err := o.Chat(ctx, Request{Cube: "alice", ReadCubes: append(eight[:7:7], "alice", "c0"), NumPredict: 1,
		Messages: []Message{{Role: "user", Content: "Where is the dog?"}}})
	if err != nil {
		t.Fatalf("seven read cubes, repeats kept once: %v", err)
	}
	if want := map[string]int{"c0": 1, "c1": 1, "c2": 1, "c3": 1, "c4": 1}; !maps.Equal(res.CubeMemories, want) {
		t.Fatalf("cube memories %v, want %v", res.CubeMemories, want)
	}
}
