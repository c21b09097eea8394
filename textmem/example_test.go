package textmem_test

import (
	"context"
	"fmt"
	"os"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/textmem"
)

func Example() {
	dir, err := os.MkdirTemp("", "textmem-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := datadir.Open(datadir.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	s, err := textmem.Open(db, textmem.DefaultOptions())
	if err != nil {
		panic(err)
	}
	defer s.Close()

	ctx := context.Background()
	for _, text := range []string{
		"Alice prefers green tea in the morning",
		"Alice's cat is called Miso",
		"The team meets on Tuesdays",
	} {
		if _, err := s.Add(ctx, "alice", textmem.Memory{Text: text, Kind: "fact"}); err != nil {
			panic(err)
		}
	}
	hits, err := s.Search(ctx, "alice", "what does alice drink in the mornings?", 2)
	if err != nil {
		panic(err)
	}
	for _, h := range hits {
		fmt.Println(h.Memory.Text)
	}
	// Output:
	// Alice prefers green tea in the morning
	// Alice's cat is called Miso
}

func ExampleStore_SearchWith() {
	dir, err := os.MkdirTemp("", "textmem-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := datadir.Open(datadir.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	s, err := textmem.Open(db, textmem.Options{})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	ctx := context.Background()
	day, _ := textmem.ParseEventTime("2023-05-08", nil)
	for _, turn := range []string{
		"Caroline: How was the weekend?",
		"Melanie: We went camping by the lake.",
		"Caroline: Sounds lovely!",
	} {
		m := textmem.Memory{Text: turn, Kind: "dialog", Source: "session-1", EventTime: day}
		if _, err := s.Add(ctx, "chat", m); err != nil {
			panic(err)
		}
	}
	// The turn about camping, and the dialog turns on either side of it.
	hits, err := s.SearchWith(ctx, "chat", textmem.Query{
		Text: "camping", K: 3, Kinds: []string{"dialog"},
		Neighbors: 1, NeighborDecay: 0.5,
	})
	if err != nil {
		panic(err)
	}
	for _, h := range hits {
		fmt.Println(h.Memory.Text)
	}
	// Output:
	// Melanie: We went camping by the lake.
	// Caroline: How was the weekend?
	// Caroline: Sounds lovely!
}
