package textmem

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestCubeRegistry(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	if _, err := s.Add(ctx, "held", Memory{Text: "a memory in a cube without a record"}); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	c, err := OpenCubes(ctx, s, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	// a cube holding memories is adopted
	if rec, err := c.Get(ctx, "held"); err != nil || rec.Name != "held" || !rec.Created.Equal(now) {
		t.Fatalf("adopted cube: %+v, %v", rec, err)
	}
	rec, err := c.Create(ctx, Cube{Name: "lily", Description: "Lily's", Metadata: map[string]string{"k": "v"}})
	if err != nil || !rec.Created.Equal(now) {
		t.Fatalf("Create: %+v, %v", rec, err)
	}
	if _, err := c.Create(ctx, Cube{Name: "lily"}); !errors.Is(err, ErrCubeExists) {
		t.Fatalf("second Create: %v, want ErrCubeExists", err)
	}
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if _, err := c.Create(ctx, Cube{Name: bad}); !errors.Is(err, ErrBadCube) {
			t.Fatalf("Create(%q): %v, want ErrBadCube", bad, err)
		}
	}
	got, err := c.Get(ctx, "lily")
	if err != nil || got.Description != "Lily's" || got.Metadata["k"] != "v" {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "held" || list[1].Name != "lily" {
		t.Fatalf("List: %+v, %v", list, err)
	}
	if err := c.Remove(ctx, "lily"); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Exists(ctx, "lily"); ok || err != nil {
		t.Fatalf("Exists after Remove: %v, %v", ok, err)
	}
	if _, err := c.Get(ctx, "lily"); !errors.Is(err, ErrUnknownCube) {
		t.Fatalf("Get after Remove: %v, want ErrUnknownCube", err)
	}
}
