package textmem

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testutil"
)

// BenchmarkTextStore compares the text tier's backends side by side in
// one run: Add and Search latency over the embedded Badger database and
// over PostgreSQL (plain and sealed), and the time from node A's Add
// returning to node B's Search finding the memory (propagation through
// LISTEN/NOTIFY and B's reload of the cube's index, whose cost grows with
// the cube: at 500 and 5000 memories; issue 16 wants it within 1 s).
//
//	go test -run '^$' -bench TextStore -benchtime 200x ./textmem/
func BenchmarkTextStore(b *testing.B) {
	ctx := context.Background()
	srv := testutil.StartPostgres(b)
	corpus := newSynthCorpus(1)
	var seedN func(b *testing.B, s *Store, n int)
	seed := func(b *testing.B, s *Store) { seedN(b, s, 500) }
	seedN = func(b *testing.B, s *Store, n int) {
		for i := range n {
			if _, err := s.Add(ctx, "c", corpus.memory(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	stores := map[string]func(b *testing.B) *Store{
		"badger": func(b *testing.B) *Store {
			db, err := datadir.Open(datadir.Options{Dir: b.TempDir(), NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { db.Close() })
			s, err := Open(db, Options{})
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
		"postgres": func(b *testing.B) *Store {
			s, _ := openPG(b, srv.CreateDB(), nil, Options{})
			return s
		},
		"postgres-sealed": func(b *testing.B) *Store {
			s, _ := openPG(b, srv.CreateDB(), testKey, Options{})
			return s
		},
	}
	for _, name := range []string{"badger", "postgres", "postgres-sealed"} {
		b.Run("add/"+name, func(b *testing.B) {
			s := stores[name](b)
			seed(b, s)
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Add(ctx, "c", corpus.memory(1000+i)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("search/"+name, func(b *testing.B) {
			s := stores[name](b)
			seed(b, s)
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Search(ctx, "c", corpus.words(3+i%3), 10); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, n := range []int{500, 5000} {
		b.Run(fmt.Sprintf("propagate/postgres/%d", n), func(b *testing.B) {
			url := srv.CreateDB()
			a, _ := openPG(b, url, nil, Options{})
			nb, _ := openPG(b, url, nil, Options{})
			seedN(b, a, n)
			if _, err := nb.Search(ctx, "c", "x", 1); err != nil { // node B loads the cube
				b.Fatal(err)
			}
			var lat []time.Duration
			b.ResetTimer()
			for i := range b.N {
				word := fmt.Sprintf("zq%dx", i)
				if _, err := a.Add(ctx, "c", Memory{Text: "propagation probe " + word}); err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				for {
					h, err := nb.Search(ctx, "c", word, 1)
					if err != nil {
						b.Fatal(err)
					}
					if len(h) == 1 {
						break
					}
					if time.Since(t0) > 10*time.Second {
						b.Fatalf("node B did not find %s in 10 s", word)
					}
					time.Sleep(100 * time.Microsecond)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
		})
	}
}
