package textmem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/memosrt/memosrt/internal/testutil"
)

func openPG(t testing.TB, url string, key []byte, opts Options) (*Store, Postgres) {
	t.Helper()
	p, err := OpenPostgres(context.Background(), url, PostgresOptions{Key: key, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s, err := OpenBackend(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		p.Close()
	})
	return s, p
}

// TestPostgresTwoNodes: two Stores (two nodes) over one database see each
// other's adds, updates, deletes and cube deletes through LISTEN/NOTIFY.
func TestPostgresTwoNodes(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		t.Run(fmt.Sprintf("sealed=%v", sealed), func(t *testing.T) {
			ctx := context.Background()
			srv := testutil.StartPostgres(t)
			url := srv.CreateDB()
			var key []byte
			if sealed {
				key = testKey
			}
			a, _ := openPG(t, url, key, Options{})
			var mu sync.Mutex
			var gone []string
			b, _ := openPG(t, url, key, Options{OnCubeDeleted: func(c string) {
				mu.Lock()
				gone = append(gone, c)
				mu.Unlock()
			}})
			// B loads the cube first, so that it must hear A's add.
			if h, err := b.Search(ctx, "c", "ukulele", 5); err != nil || len(h) != 0 {
				t.Fatalf("empty cube: %v %v", h, err)
			}
			m := mustAdd(t, a, "c", Memory{Text: "Caroline plays the ukulele on Sundays"})
			start := time.Now()
			testutil.WaitFor(t, "B finds A's memory", func() bool {
				h, err := b.Search(ctx, "c", "ukulele", 5)
				return err == nil && len(h) == 1 && h[0].Memory.ID == m.ID
			})
			t.Logf("B found A's memory %v after the add returned (BenchmarkPostgresPropagation measures it)", time.Since(start))
			if _, err := b.Update(ctx, "c", m.ID, "Caroline plays the banjo on Sundays"); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, "A sees B's update", func() bool {
				h, err := a.Search(ctx, "c", "banjo", 5)
				u, _ := a.Search(ctx, "c", "ukulele", 5)
				return err == nil && len(h) == 1 && h[0].Memory.Version == 2 && len(u) == 0
			})
			if hist, err := a.History(ctx, "c", m.ID); err != nil || len(hist) != 2 || hist[0].Text != m.Text {
				t.Fatalf("history on A: %+v %v", hist, err)
			}
			if err := a.Delete(ctx, "c", m.ID); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, "B drops A's delete", func() bool {
				h, err := b.Search(ctx, "c", "banjo", 5)
				return err == nil && len(h) == 0
			})
			mustAdd(t, a, "c", Memory{Text: "a memory of cube c"})
			mustAdd(t, a, "d", Memory{Text: "a memory of cube d"})
			if cs, err := b.Cubes(ctx); err != nil || !slices.Equal(cs, []string{"c", "d"}) {
				t.Fatalf("cubes on B: %v %v", cs, err)
			}
			if err := a.DeleteCube(ctx, "c"); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, "B hears the cube delete", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.Equal(gone, []string{"c"})
			})
			if l, err := b.List(ctx, "c"); err != nil || len(l) != 0 {
				t.Fatalf("cube c on B after delete: %v %v", l, err)
			}
			if h, err := b.Search(ctx, "c", "memory", 5); err != nil || len(h) != 0 {
				t.Fatalf("cube c searched on B after delete: %v %v", h, err)
			}
			if cs, err := b.Cubes(ctx); err != nil || !slices.Equal(cs, []string{"d"}) {
				t.Fatalf("cubes on B after delete: %v %v", cs, err)
			}
		})
	}
}

// TestPostgresConcurrentNodes: two nodes writing one cube at once keep
// exact counts: every distinct memory once, identical ones once, and the
// stored statistics equal to the records.
func TestPostgresConcurrentNodes(t *testing.T) {
	ctx := context.Background()
	srv := testutil.StartPostgres(t)
	url := srv.CreateDB()
	a, _ := openPG(t, url, nil, Options{NearDuplicate: -1})
	b, _ := openPG(t, url, nil, Options{NearDuplicate: -1})
	const per = 12
	var wg sync.WaitGroup
	errs := make(chan error, 4*per)
	for i, s := range []*Store{a, b} {
		for j := range per {
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, err := s.Add(ctx, "c", Memory{Text: fmt.Sprintf("node %d wrote distinct memory number %d", i, j)})
				errs <- err
			}()
			go func() {
				defer wg.Done()
				_, err := s.Add(ctx, "c", Memory{Text: fmt.Sprintf("both nodes wrote shared memory %d", j)})
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*Store{a, b} {
		l, err := s.List(ctx, "c")
		if err != nil || len(l) != 3*per {
			t.Fatalf("list: %d memories (%v), want %d", len(l), err, 3*per)
		}
	}
	var st cubeStats
	err := a.be.View(ctx, "c", func(txn Txn) error {
		v, err := txn.Get(statsKey())
		if err == nil {
			st, err = decodeStats(v)
		}
		return err
	})
	if err != nil || st.docs != 3*per {
		t.Fatalf("stored stats: %+v %v, want %d docs", st, err, 3*per)
	}
	testutil.WaitFor(t, "both indexes hold every memory", func() bool {
		ha, _ := a.Search(ctx, "c", "shared memory", 100)
		hb, _ := b.Search(ctx, "c", "distinct memory", 100)
		return len(ha) == 3*per && len(hb) == 3*per
	})
}

// TestPostgresSealed: with a Key no row holds a text, a word, a cube name
// or an id in the clear; another key, or none, is refused.
func TestPostgresSealed(t *testing.T) {
	ctx := context.Background()
	srv := testutil.StartPostgres(t)
	url := srv.CreateDB()
	s, _ := openPG(t, url, testKey, Options{})
	m := mustAdd(t, s, "secretcube", Memory{Text: "the password is marmalade", Tags: []string{"hush"}})
	if _, err := s.Update(ctx, "secretcube", m.ID, "the password is gooseberry"); err != nil {
		t.Fatal(err)
	}
	if err := s.be.CreateRecord(ctx, "secretcube", []byte(`{"name":"secretcube"}`)); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT cube::bytea, k, v FROM memosrt_text
		UNION ALL SELECT tag::bytea, name, coalesce(record, '') FROM memosrt_text_cubes`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var c, k, v []byte
		if err := rows.Scan(&c, &k, &v); err != nil {
			t.Fatal(err)
		}
		n++
		for _, secret := range []string{"marmalade", "gooseberry", "password", "secretcube", "hush", m.ID} {
			for _, b := range [][]byte{c, k, v} {
				if bytes.Contains(b, []byte(secret)) {
					t.Errorf("%q in the clear in row (%x, %x)", secret, c, k)
				}
			}
		}
	}
	if rows.Err() != nil || n < 5 {
		t.Fatalf("%d rows read (%v)", n, rows.Err())
	}
	other := bytes.Repeat([]byte{7}, 32)
	for _, key := range [][]byte{other, nil} {
		if _, err := OpenPostgres(ctx, url, PostgresOptions{Key: key}); !errors.Is(err, ErrWrongKey) {
			t.Errorf("key %x: %v, want ErrWrongKey", key, err)
		}
	}
	// the same key reads everything back
	s2, _ := openPG(t, url, testKey, Options{})
	h, err := s2.Search(ctx, "secretcube", "gooseberry", 5)
	if err != nil || len(h) != 1 || h[0].Memory.Text != "the password is gooseberry" {
		t.Fatalf("search with the key: %v %v", h, err)
	}
	if hist, err := s2.History(ctx, "secretcube", m.ID); err != nil || len(hist) != 2 || hist[0].Text != m.Text {
		t.Fatalf("history with the key: %v %v", hist, err)
	}
	if cs, err := s2.Cubes(ctx); err != nil || !slices.Equal(cs, []string{"secretcube"}) {
		t.Fatalf("cubes with the key: %v %v", cs, err)
	}
}

// TestPostgresDown: with the server killed writes and reads fail with
// ErrUnavailable and lose nothing acknowledged; when it is back the same
// Store works again and hears the other node again.
func TestPostgresDown(t *testing.T) {
	ctx := context.Background()
	srv := testutil.StartPostgres(t)
	url := srv.CreateDB()
	a, pa := openPG(t, url, nil, Options{})
	b, _ := openPG(t, url, nil, Options{})
	kept := mustAdd(t, a, "c", Memory{Text: "written before the crash"})
	if h, err := b.Search(ctx, "c", "crash", 5); err != nil || len(h) != 1 {
		t.Fatalf("before: %v %v", h, err)
	}
	srv.Kill()
	if _, err := a.Add(ctx, "c", Memory{Text: "written while down"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("add while down: %v, want ErrUnavailable", err)
	}
	if _, err := a.Search(ctx, "c", "crash", 5); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("search while down: %v, want ErrUnavailable", err)
	}
	testutil.WaitFor(t, "the listener reports down", func() bool { return !pa.Up() })
	srv.Start()
	testutil.WaitFor(t, "the listener reconnects", pa.Up)
	testutil.WaitFor(t, "adds work again", func() bool {
		_, err := a.Add(ctx, "c", Memory{Text: "written after the restart"})
		return err == nil
	})
	testutil.WaitFor(t, "B finds it", func() bool {
		h, err := b.Search(ctx, "c", "restart", 5)
		return err == nil && len(h) == 1
	})
	l, err := b.List(ctx, "c")
	if err != nil || len(l) != 2 || l[0].ID != kept.ID {
		t.Fatalf("after restart: %+v %v", l, err)
	}

	// hung (SIGSTOP, connections open): ErrUnavailable within the call
	// bound, Up false from the health check; continued: both work again
	srv.Pause()
	testutil.WaitFor(t, "the health check to report the hung server", func() bool { return !pa.Up() })
	if _, err := a.Add(ctx, "c", Memory{Text: "written while hung"}); !errors.Is(err, ErrUnavailable) {
		srv.Resume()
		t.Fatalf("add while hung: %v, want ErrUnavailable", err)
	}
	srv.Resume()
	testutil.WaitFor(t, "the server answering again", pa.Up)
	testutil.WaitFor(t, "adds after the hang", func() bool {
		_, err := a.Add(ctx, "c", Memory{Text: "written after the hang"})
		return err == nil
	})
	if l, err := b.List(ctx, "c"); err != nil || len(l) != 3 {
		t.Fatalf("after the hang: %d memories (%v), want 3", len(l), err)
	}
}

// indexImage is what a cube's in-memory index holds, by memory id: each
// live doc's length and each term's (id, tf) postings.
func indexImage(t *testing.T, s *Store, cube string) (docs map[string]uint32, posts map[string]map[string]uint16, live int, total int64) {
	t.Helper()
	ix, err := s.index(context.Background(), cube)
	if err != nil {
		t.Fatal(err)
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	docs = map[string]uint32{}
	for id, n := range ix.byID {
		docs[id] = ix.docs[n].meta.length
	}
	posts = map[string]map[string]uint16{}
	for term, p := range ix.terms {
		m := map[string]uint16{}
		for i, n := range p.docs {
			m[ix.docs[n].id] = p.tfs[i]
		}
		posts[term] = m
	}
	return docs, posts, ix.live, ix.totalLen
}

// TestPostgresIndexesAgree: after two nodes add, update and delete
// memories of one cube at once, each node's index (kept current from the
// other's notices, memory by memory) equals one loaded afresh.
func TestPostgresIndexesAgree(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		t.Run(fmt.Sprintf("sealed=%v", sealed), func(t *testing.T) {
			ctx := context.Background()
			srv := testutil.StartPostgres(t)
			url := srv.CreateDB()
			var key []byte
			if sealed {
				key = testKey
			}
			a, _ := openPG(t, url, key, Options{NearDuplicate: -1})
			b, _ := openPG(t, url, key, Options{NearDuplicate: -1})
			for _, s := range []*Store{a, b} {
				if _, err := s.Search(ctx, "c", "x", 1); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			done := make(chan struct{})
			var readers sync.WaitGroup
			for _, s := range []*Store{a, b} {
				// each node also searches all along, so that it applies
				// the other's notices a few at a time, to memories it has
				readers.Add(1)
				go func() {
					defer readers.Done()
					for {
						select {
						case <-done:
							return
						default:
						}
						if _, err := s.Search(ctx, "c", "apples figs", 5); err != nil {
							t.Error(err)
							return
						}
						time.Sleep(time.Millisecond)
					}
				}()
			}
			for i, s := range []*Store{a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine []string
					for j := range 40 {
						text := fmt.Sprintf("node %d memory %d about apples pears and plum %d", i, j, j%7)
						switch {
						case j%5 == 3 && len(mine) > 0:
							if _, err := s.Update(ctx, "c", mine[0], text+" rewritten with figs"); err != nil {
								t.Error(err)
							}
						case j%7 == 6 && len(mine) > 1:
							if err := s.Delete(ctx, "c", mine[1]); err != nil {
								t.Error(err)
							}
							mine = slices.Delete(mine, 1, 2)
						default:
							m, err := s.Add(ctx, "c", Memory{Text: text})
							if err != nil {
								t.Error(err)
								return
							}
							mine = append(mine, m.ID)
						}
					}
				}()
			}
			wg.Wait()
			close(done)
			readers.Wait()
			fresh, _ := openPG(t, url, key, Options{NearDuplicate: -1})
			wd, wp, wl, wt := indexImage(t, fresh, "c")
			if wl < 40 {
				t.Fatalf("%d memories", wl)
			}
			for name, s := range map[string]*Store{"A": a, "B": b} {
				testutil.WaitFor(t, "node "+name+"'s index to equal a fresh load", func() bool {
					d, p, l, tot := indexImage(t, s, "c")
					return l == wl && tot == wt && maps.Equal(d, wd) && maps.EqualFunc(p, wp, maps.Equal)
				})
			}
		})
	}
}

// TestPostgresDeleteVersusAdd: with RequireRecord, a cube deleted on one
// node while another adds to it ends with neither a memory nor a record:
// the add was deleted with the cube or refused (ErrNoRecord), never left
// in a cube without a record. Deleting leaves no row of the cube.
func TestPostgresDeleteVersusAdd(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		t.Run(fmt.Sprintf("sealed=%v", sealed), func(t *testing.T) {
			ctx := context.Background()
			srv := testutil.StartPostgres(t)
			url := srv.CreateDB()
			var key []byte
			if sealed {
				key = testKey
			}
			a, pa := openPG(t, url, key, Options{RequireRecord: true})
			b, _ := openPG(t, url, key, Options{RequireRecord: true})
			if _, err := b.Add(ctx, "norecord", Memory{Text: "a cube nobody created"}); !errors.Is(err, ErrNoRecord) {
				t.Fatalf("add without a record: %v, want ErrNoRecord", err)
			}
			refused := 0
			for i := range 30 {
				cube := fmt.Sprintf("race%d", i)
				if err := a.be.CreateRecord(ctx, cube, []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
				mustAdd(t, a, cube, Memory{Text: "already there"})
				var wg sync.WaitGroup
				var addErr, delErr error
				wg.Add(2)
				go func() { defer wg.Done(); delErr = a.DeleteCube(ctx, cube) }()
				go func() {
					defer wg.Done()
					_, addErr = b.Add(ctx, cube, Memory{Text: fmt.Sprintf("added during the delete %d", i)})
				}()
				wg.Wait()
				if delErr != nil || (addErr != nil && !errors.Is(addErr, ErrNoRecord)) {
					t.Fatalf("delete %v, add %v", delErr, addErr)
				}
				if addErr != nil {
					refused++
				}
				if _, err := a.be.Record(ctx, cube); !errors.Is(err, ErrNoRecord) {
					t.Fatalf("%s: record after delete: %v", cube, err)
				}
				rows := 0
				err := pa.View(ctx, cube, func(txn Txn) error {
					return txn.Iterate(nil, true, func(_, _ []byte) error { rows++; return nil })
				})
				if err != nil || rows != 0 {
					t.Fatalf("%s: %d rows left after the delete (add: %v) %v", cube, rows, addErr, err)
				}
			}
			t.Logf("%d of 30 adds refused, the rest deleted with their cube", refused)
		})
	}
}

// TestPostgresOpenTogether: nodes opening a fresh database at once all
// start (the tables are made under an advisory lock), and a text holding
// U+0000 does not break the memosrt_memories view.
func TestPostgresOpenTogether(t *testing.T) {
	ctx := context.Background()
	srv := testutil.StartPostgres(t)
	url := srv.CreateDB()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := OpenPostgres(ctx, url, PostgresOptions{})
			if err == nil {
				p.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	s, _ := openPG(t, url, nil, Options{})
	mustAdd(t, s, "c", Memory{Text: "nul \x00 char"})
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var text string // json keeps the escape; jsonb (and ->>) refuse U+0000
	if err := conn.QueryRow(ctx, `SELECT memory::text FROM memosrt_memories WHERE cube = 'c'`).Scan(&text); err != nil || !strings.Contains(text, `"text":"nul \u0000 char"`) {
		t.Fatalf("view: %q %v", text, err)
	}
}
