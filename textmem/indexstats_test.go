package textmem

import (
	"context"
	"testing"
)

// TestIndexStats: the counts are exact, the estimate grows with what the
// indexes hold and shrinks with what is deleted, and nothing is counted
// after Close.
func TestIndexStats(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	if st := s.IndexStats(); st != (IndexStats{}) {
		t.Fatalf("empty store: %+v, want zero", st)
	}
	var ids []string
	for _, txt := range []string{"Lily has a dog named Max.", "Max is brown and likes the park.", "Lily's favourite food is apple pie."} {
		m, err := s.Add(ctx, "a", Memory{Text: txt, Kind: "fact", Source: "s1", Tags: []string{"pets"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	for _, txt := range []string{"The office is in Lyon.", "Bob owns the budget."} {
		if _, err := s.Add(ctx, "b", Memory{Text: txt}); err != nil {
			t.Fatal(err)
		}
	}
	five := s.IndexStats()
	if five.Cubes != 2 || five.Memories != 5 || five.Bytes <= 0 {
		t.Fatalf("after 5 adds in 2 cubes: %+v", five)
	}
	if err := s.Delete(ctx, "a", ids[0]); err != nil {
		t.Fatal(err)
	}
	four := s.IndexStats()
	if four.Cubes != 2 || four.Memories != 4 || four.Bytes >= five.Bytes {
		t.Fatalf("after a delete: %+v (before %+v): want 4 memories and fewer bytes", four, five)
	}
	if err := s.DeleteCube(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	two := s.IndexStats()
	if two.Memories != 2 || two.Bytes >= four.Bytes {
		t.Fatalf("after deleting cube b: %+v (before %+v)", two, four)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st := s.IndexStats(); st != (IndexStats{}) {
		t.Fatalf("after Close: %+v, want zero", st)
	}
}
