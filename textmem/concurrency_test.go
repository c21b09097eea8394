package textmem

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseEventTime(t *testing.T) {
	berlin := time.FixedZone("CET", 3600)
	cases := []struct {
		in   string
		loc  *time.Location
		want string // RFC 3339 in UTC, "" for an error
	}{
		{"2023-05-08T13:56:00+02:00", nil, "2023-05-08T11:56:00Z"},
		{"2023-05-08T13:56:00Z", berlin, "2023-05-08T13:56:00Z"},
		{"2023-05-08T13:56:00.5-07:00", nil, "2023-05-08T20:56:00.5Z"},
		{"2023-05-08 13:56", berlin, "2023-05-08T12:56:00Z"},
		{"2023-05-08", nil, "2023-05-08T00:00:00Z"},
		{"2023-05-08", berlin, "2023-05-07T23:00:00Z"},
		{" 1:56 pm on 8 May, 2023 ", nil, "2023-05-08T13:56:00Z"},
		{"yesterday", nil, ""},
		{"2023-13-01", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseEventTime(tc.in, tc.loc)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("parsed %v", got)
				}
				return
			}
			if err != nil || got.Format(time.RFC3339Nano) != tc.want || got.Location() != time.UTC {
				t.Errorf("got %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

// TestConcurrent runs adds, updates, deletes and searches on several cubes
// at once (run with -race), then checks every cube holds exactly what its
// writers left.
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{NearDuplicate: -1})
	const cubes, writers, per = 3, 4, 25
	var wg sync.WaitGroup
	for c := range cubes {
		cube := fmt.Sprintf("cube%d", c)
		for w := range writers {
			wg.Go(func() {
				for i := range per {
					m, err := s.Add(ctx, cube, Memory{Text: fmt.Sprintf("writer %d note %d about topic%d", w, i, i%5)})
					if err != nil {
						t.Error(err)
						return
					}
					switch i % 5 {
					case 1:
						if _, err := s.Update(ctx, cube, m.ID, m.Text+" revised"); err != nil {
							t.Error(err)
						}
					case 2:
						if err := s.Delete(ctx, cube, m.ID); err != nil {
							t.Error(err)
						}
					}
					if _, err := s.Search(ctx, cube, "topic3 note", 5); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	for c := range cubes {
		cube := fmt.Sprintf("cube%d", c)
		list, err := s.List(ctx, cube)
		if err != nil {
			t.Fatal(err)
		}
		if want := writers * per * 4 / 5; len(list) != want {
			t.Errorf("%s holds %d, want %d", cube, len(list), want)
		}
		hits, err := s.SearchWith(ctx, cube, Query{Text: "revised", K: 1000})
		if err != nil || len(hits) != writers*per/5 {
			t.Errorf("%s: %d revised hits (%v), want %d", cube, len(hits), err, writers*per/5)
		}
		ix, _ := s.index(ctx, cube)
		ix.mu.RLock()
		live := ix.live
		ix.mu.RUnlock()
		if live != len(list) {
			t.Errorf("%s index has %d live docs, store %d", cube, live, len(list))
		}
	}
}

func TestLargeText(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	var b strings.Builder
	for i := 0; b.Len() < 64<<10-16; i++ {
		fmt.Fprintf(&b, "w%d ", i)
	}
	m, err := s.Add(ctx, "c", Memory{Text: b.String()})
	if err != nil {
		t.Fatalf("add %d bytes: %v", b.Len(), err)
	}
	hits, err := s.Search(ctx, "c", "w4242", 1)
	if err != nil || len(hits) != 1 || hits[0].Memory.ID != m.ID {
		t.Errorf("search: %v", err)
	}
	if err := s.Delete(ctx, "c", m.ID); err != nil {
		t.Fatal(err)
	}
}
