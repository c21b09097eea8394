package textmem

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/badger"
)

// Store is the text tier over one Badger database. It is safe for
// concurrent use. Only one Store may be open per database at a time: it
// keeps an in-memory image of each cube's index that other writers would
// not update.
type Store struct {
	db   *bg.DB
	opts Options
	log  *slog.Logger

	// mu guards closed, cubes and lastNanos.
	mu        sync.Mutex
	closed    bool
	cubes     map[string]*cubeIndex
	lastNanos uint64
}

// Open returns a Store over db. It loads no cube until that cube is first
// used. The Store does not own db: Close leaves it open.
func Open(db *badger.DB, opts Options) (*Store, error) {
	if db == nil || db.Badger() == nil {
		return nil, errors.New("textmem: nil database")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	return &Store{
		db:    db.Badger(),
		opts:  opts,
		log:   opts.Logger.With("tier", "text"),
		cubes: make(map[string]*cubeIndex),
	}, nil
}

// Close releases the in-memory indexes. Later calls return ErrClosed.
// Idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.cubes = nil
	return nil
}

// newID returns a fresh, strictly increasing id.
func (s *Store) newID(now time.Time) string {
	s.mu.Lock()
	n := uint64(now.UnixNano())
	if n <= s.lastNanos {
		n = s.lastNanos + 1
	}
	s.lastNanos = n
	s.mu.Unlock()
	return formatID(n, rand.Uint32())
}

// index returns the loaded index of cube.
func (s *Store) index(ctx context.Context, cube string) (*cubeIndex, error) {
	if err := checkCube(cube); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	ix := s.cubes[cube]
	if ix == nil {
		ix = newCubeIndex(s.vectorIndexMaker())
		s.cubes[cube] = ix
	}
	s.mu.Unlock()
	if ix.isLoaded() {
		return ix, nil
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if ix.isLoaded() {
		return ix, nil
	}
	if err := s.load(ctx, cube, ix); err != nil {
		return nil, err
	}
	return ix, nil
}

func (s *Store) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// load reads the persisted index of cube into ix, first rebuilding it from
// the stored texts if it was built by another Analyzer. The caller holds
// ix.writeMu.
func (s *Store) load(ctx context.Context, cube string, ix *cubeIndex) error {
	var st cubeStats
	var hasStats bool
	err := s.db.View(func(txn *bg.Txn) error {
		item, err := txn.Get(statsKey(cube))
		if errors.Is(err, bg.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		hasStats = true
		return item.Value(func(v []byte) error {
			st, err = decodeStats(v)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("textmem: load cube %s: %w", cube, err)
	}
	if hasStats && st.analyzer != s.opts.Analyzer.Name() {
		s.log.Info("rebuilding cube index", "cube", cube, "from", st.analyzer, "to", s.opts.Analyzer.Name())
		if err := s.rebuild(ctx, cube); err != nil {
			return err
		}
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.reset()
	err = s.db.View(func(txn *bg.Txn) error {
		// Docs first, so that postings can map ids to doc numbers.
		pre := nsPrefix(cube, nsDoc)
		it := txn.NewIterator(bg.IteratorOptions{Prefix: pre, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			id := string(item.Key()[len(pre):])
			err := item.Value(func(v []byte) error {
				d, err := decodeDocMeta(v)
				if err != nil {
					return fmt.Errorf("%w: doc %s", err, id)
				}
				ix.addDoc(id, d)
				return nil
			})
			if err != nil {
				return err
			}
			if len(ix.docs)%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
		it.Close()

		pre = nsPrefix(cube, nsPost)
		it = txn.NewIterator(bg.IteratorOptions{Prefix: pre, PrefetchValues: false})
		defer it.Close()
		count := 0
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			k := item.Key()[len(pre):]
			z := bytes.IndexByte(k, 0)
			if z < 0 {
				return fmt.Errorf("%w: posting key %q", errCorrupt, k)
			}
			n, ok := ix.byID[string(k[z+1:])]
			if !ok {
				continue // posting of a doc whose record is gone; ignore
			}
			var tf uint64
			err := item.Value(func(v []byte) error {
				var m int
				tf, m = binary.Uvarint(v)
				if m <= 0 {
					return fmt.Errorf("%w: posting value", errCorrupt)
				}
				return nil
			})
			if err != nil {
				return err
			}
			ix.addPosting(string(k[:z]), n, int(tf))
			if count++; count%65536 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
		it.Close()
		return s.loadVectors(txn, cube, ix)
	})
	if err != nil {
		ix.reset()
		return fmt.Errorf("textmem: load cube %s: %w", cube, err)
	}
	if hasStats && st.analyzer == s.opts.Analyzer.Name() &&
		(st.docs != uint64(ix.live) || st.totalLen != uint64(ix.totalLen)) {
		s.log.Warn("cube stats disagree with records; using records",
			"cube", cube, "stats_docs", st.docs, "docs", ix.live)
	}
	if len(ix.docs) > 0 && validID(ix.docs[len(ix.docs)-1].id) {
		// Keep ids increasing across restarts even if the clock went back.
		if n, err := strconv.ParseUint(ix.docs[len(ix.docs)-1].id[:16], 16, 64); err == nil {
			s.mu.Lock()
			s.lastNanos = max(s.lastNanos, n)
			s.mu.Unlock()
		}
	}
	ix.loaded = true
	s.log.Debug("cube loaded", "cube", cube, "docs", ix.live, "terms", len(ix.terms))
	return nil
}

// rebuild rewrites the postings, doc records and stats of cube from its
// stored texts with the current Analyzer. The caller holds the cube's
// writeMu.
func (s *Store) rebuild(ctx context.Context, cube string) error {
	for _, ns := range []byte{nsPost, nsDoc} {
		if err := s.dropPrefix(ctx, nsPrefix(cube, ns)); err != nil {
			return err
		}
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	var st cubeStats
	st.analyzer = s.opts.Analyzer.Name()
	err := s.scanMemories(ctx, cube, func(m Memory) error {
		tf, dl := termFreqs(s.opts.Analyzer, m.Text)
		if err := wb.Set(nsKey(cube, nsDoc, m.ID), metaOf(m, dl).encode()); err != nil {
			return err
		}
		for t, c := range tf {
			if err := wb.Set(postKey(cube, t, m.ID), binary.AppendUvarint(nil, uint64(c))); err != nil {
				return err
			}
		}
		st.docs++
		st.totalLen += uint64(dl)
		return nil
	})
	if err == nil {
		err = wb.Set(statsKey(cube), st.encode())
	}
	if err == nil {
		err = wb.Flush()
	}
	if err != nil {
		return fmt.Errorf("textmem: rebuild cube %s: %w", cube, err)
	}
	return nil
}

// dropPrefix deletes every key with prefix pre, in batches.
func (s *Store) dropPrefix(ctx context.Context, pre []byte) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var keys [][]byte
		err := s.db.View(func(txn *bg.Txn) error {
			it := txn.NewIterator(bg.IteratorOptions{Prefix: pre})
			defer it.Close()
			for it.Rewind(); it.Valid() && len(keys) < 10000; it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			return nil
		}
		wb := s.db.NewWriteBatch()
		for _, k := range keys {
			if err := wb.Delete(k); err != nil {
				wb.Cancel()
				return err
			}
		}
		if err := wb.Flush(); err != nil {
			return err
		}
	}
}

// scanMemories calls fn with every current memory of cube, in id order.
func (s *Store) scanMemories(ctx context.Context, cube string, fn func(Memory) error) error {
	return s.db.View(func(txn *bg.Txn) error {
		pre := nsPrefix(cube, nsMem)
		it := txn.NewIterator(bg.IteratorOptions{Prefix: pre, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		i := 0
		for it.Rewind(); it.Valid(); it.Next() {
			if i++; i%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			var m Memory
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &m) }); err != nil {
				return fmt.Errorf("textmem: memory %s: %w", it.Item().Key(), err)
			}
			if err := fn(m); err != nil {
				return err
			}
		}
		return nil
	})
}

func getMemory(txn *bg.Txn, cube, id string) (Memory, error) {
	var m Memory
	if !validID(id) {
		return m, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	item, err := txn.Get(nsKey(cube, nsMem, id))
	if errors.Is(err, bg.ErrKeyNotFound) {
		return m, fmt.Errorf("%w: %s in cube %s", ErrNotFound, id, cube)
	}
	if err != nil {
		return m, err
	}
	err = item.Value(func(v []byte) error { return json.Unmarshal(v, &m) })
	return m, err
}

func setJSON(txn *bg.Txn, key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return txn.Set(key, b)
}

// Add stores m in cube and returns it as stored. m.Text is required;
// m.Kind, m.Tags, m.Source and m.EventTime are kept (EventTime converted to
// UTC); m.ID, m.Cube, m.Created, m.Updated and m.Version are assigned.
//
// If the cube already holds a memory with the same content (same text after
// case folding and whitespace collapsing, and the same EventTime), Add
// stores nothing and returns that memory: concurrent identical Adds store
// one memory. Otherwise, if a memory of the same Kind and EventTime is a
// near duplicate (see Options.NearDuplicate), it is merged: it takes m's
// text as its next version (the old text stays in History), gains m's tags,
// and is returned. The memory, its index postings, vector and duplicate key
// are written in one transaction.
func (s *Store) Add(ctx context.Context, cube string, m Memory) (Memory, error) {
	return s.add(ctx, cube, m, false)
}

// Import stores m in cube as it was exported: m.ID (the shape Add
// assigns), m.Created, m.Updated and m.Version are kept (zero times are
// now, a zero version is 1); m.Text, Kind, Tags, Source and EventTime as
// in Add. Unlike Add it neither deduplicates nor merges: an archive holds
// what its cube held. Errors: ErrBadID for an id Add would not assign,
// ErrIDExists when cube already holds that id, and Add's. Nothing is
// stored on error.
func (s *Store) Import(ctx context.Context, cube string, m Memory) (Memory, error) {
	if !validID(m.ID) {
		return Memory{}, fmt.Errorf("%w: %q", ErrBadID, m.ID)
	}
	return s.add(ctx, cube, m, true)
}

// add is Add, or with keep Import.
func (s *Store) add(ctx context.Context, cube string, m Memory, keep bool) (Memory, error) {
	if err := checkText(m.Text, s.opts.MaxTextBytes); err != nil {
		return Memory{}, err
	}
	if err := checkMeta(&m); err != nil {
		return Memory{}, err
	}
	if err := s.checkTermKeys(cube, m.Text); err != nil {
		return Memory{}, err
	}
	ix, err := s.index(ctx, cube)
	if err != nil {
		return Memory{}, err
	}
	vec, err := s.embedText(ctx, m.Text)
	if err != nil {
		return Memory{}, err
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if err := s.checkOpen(); err != nil {
		return Memory{}, err
	}

	now := s.opts.Now().UTC()
	if keep {
		if m.Created.IsZero() {
			m.Created = now
		}
		if m.Updated.IsZero() {
			m.Updated = m.Created
		}
		m.Created, m.Updated = m.Created.UTC(), m.Updated.UTC()
		m.Version = max(m.Version, 1)
	} else {
		m.ID = s.newID(now)
		m.Created, m.Updated = now, now
		m.Version = 1
	}
	m.Cube = cube
	if !m.EventTime.IsZero() {
		m.EventTime = m.EventTime.UTC()
	}
	m.Tags = append([]string(nil), m.Tags...)
	if len(m.Tags) == 0 {
		m.Tags = nil
	}
	tf, dl := termFreqs(s.opts.Analyzer, m.Text)
	meta := metaOf(m, dl)

	ix.mu.RLock()
	st := cubeStats{analyzer: s.opts.Analyzer.Name(), docs: uint64(ix.live) + 1, totalLen: uint64(ix.totalLen) + uint64(dl)}
	ix.mu.RUnlock()

	near := near{}
	if !keep {
		near = s.nearCandidate(ix, m, tf, vec)
	}
	var dup *Memory
	var merged *rewrite
	err = s.db.Update(func(txn *bg.Txn) error {
		dup, merged = nil, nil
		hk := nsKey(cube, nsHash, contentHash(m.Text, m.EventTime))
		if keep {
			switch _, err := txn.Get(nsKey(cube, nsMem, m.ID)); {
			case err == nil:
				return fmt.Errorf("%w: %s", ErrIDExists, m.ID)
			case !errors.Is(err, bg.ErrKeyNotFound):
				return err
			}
		}
		item, err := txn.Get(hk)
		switch {
		case keep:
			// an archive's memories stand as they are: no duplicate check
		case err == nil:
			var id []byte
			if id, err = item.ValueCopy(nil); err != nil {
				return err
			}
			old, err := getMemory(txn, cube, string(id))
			if err == nil {
				dup = &old
				return nil
			}
			if !errors.Is(err, ErrNotFound) {
				return err
			}
			// A stale duplicate key: overwrite it below.
		case !errors.Is(err, bg.ErrKeyNotFound):
			return err
		}
		for _, nid := range near.ids {
			old, err := getMemory(txn, cube, nid)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			if err == nil && s.nearEnough(near, old, tf) {
				next := old
				next.Text = m.Text
				for _, t := range m.Tags {
					if !slices.Contains(next.Tags, t) {
						next.Tags = append(next.Tags, t)
					}
				}
				rw, err := s.rewriteTxn(txn, ix, old, next, vec)
				if err != nil {
					return err
				}
				merged = &rw
				return nil
			}
		}
		if err := setJSON(txn, nsKey(cube, nsMem, m.ID), m); err != nil {
			return err
		}
		if err := txn.Set(nsKey(cube, nsDoc, m.ID), meta.encode()); err != nil {
			return err
		}
		for t, c := range tf {
			if err := txn.Set(postKey(cube, t, m.ID), binary.AppendUvarint(nil, uint64(c))); err != nil {
				return err
			}
		}
		if err := txn.Set(hk, []byte(m.ID)); err != nil {
			return err
		}
		if vec != nil {
			if err := txn.Set(nsKey(cube, nsVec, m.ID), encodeVector(s.opts.Embedder.Name(), vec)); err != nil {
				return err
			}
		}
		return txn.Set(statsKey(cube), st.encode())
	})
	if errors.Is(err, bg.ErrTxnTooBig) {
		err = fmt.Errorf("%w: %d distinct index terms do not fit one transaction (%v)", ErrTooLarge, len(tf), err)
	}
	if err != nil {
		return Memory{}, fmt.Errorf("textmem: add to cube %s: %w", cube, err)
	}
	if dup != nil {
		s.log.Debug("duplicate add", "cube", cube, "id", dup.ID)
		return *dup, nil
	}
	if merged != nil {
		s.log.Debug("near-duplicate merged", "cube", cube, "id", merged.cur.ID, "version", merged.cur.Version)
		ix.mu.Lock()
		merged.apply(ix)
		ix.mu.Unlock()
		return merged.cur, nil
	}
	ix.mu.Lock()
	n := ix.addDoc(m.ID, meta)
	for t, c := range tf {
		ix.addPosting(t, n, c)
	}
	if vec != nil && ix.vec != nil {
		ix.vec.Add(n, vec)
	}
	ix.mu.Unlock()
	return m, nil
}

// Get returns the current version of memory id of cube.
func (s *Store) Get(ctx context.Context, cube, id string) (Memory, error) {
	if err := checkCube(cube); err != nil {
		return Memory{}, err
	}
	if err := s.checkOpen(); err != nil {
		return Memory{}, err
	}
	if err := ctx.Err(); err != nil {
		return Memory{}, err
	}
	var m Memory
	err := s.db.View(func(txn *bg.Txn) error {
		var err error
		m, err = getMemory(txn, cube, id)
		return err
	})
	return m, err
}

// List returns every memory of cube, oldest first (by Created, then ID).
// An unknown or empty cube gives an empty slice and no error.
func (s *Store) List(ctx context.Context, cube string) ([]Memory, error) {
	if err := checkCube(cube); err != nil {
		return nil, err
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	out := []Memory{}
	err := s.scanMemories(ctx, cube, func(m Memory) error {
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Update replaces the text of memory id with text, keeping the previous
// version readable through History. Version grows by one and Updated is
// set; Created, EventTime, Kind, Tags and Source are kept.
func (s *Store) Update(ctx context.Context, cube, id string, text string) (Memory, error) {
	return s.Patch(ctx, cube, id, Patch{Text: &text})
}

// Patch is a partial update of a memory: the fields it sets change, nil
// ones are kept.
type Patch struct {
	Text   *string
	Kind   *string
	Tags   *[]string
	Source *string
}

// Patch applies p to memory id as one new version, as Update does: a new
// text is checked and re-embedded; without one the vector is kept.
// Errors as Update, and ErrInvalidUTF8 for a kind, tag or source.
func (s *Store) Patch(ctx context.Context, cube, id string, p Patch) (Memory, error) {
	var vec []float32
	if p.Text != nil {
		if err := checkText(*p.Text, s.opts.MaxTextBytes); err != nil {
			return Memory{}, err
		}
		if err := s.checkTermKeys(cube, *p.Text); err != nil {
			return Memory{}, err
		}
	}
	ix, err := s.index(ctx, cube)
	if err != nil {
		return Memory{}, err
	}
	if p.Text != nil {
		if vec, err = s.embedText(ctx, *p.Text); err != nil {
			return Memory{}, err
		}
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if err := s.checkOpen(); err != nil {
		return Memory{}, err
	}
	var rw rewrite
	err = s.db.Update(func(txn *bg.Txn) error {
		old, err := getMemory(txn, cube, id)
		if err != nil {
			return err
		}
		cur := old
		if p.Text != nil {
			cur.Text = *p.Text
		}
		if p.Kind != nil {
			cur.Kind = *p.Kind
		}
		if p.Tags != nil {
			cur.Tags = slices.Clone(*p.Tags)
		}
		if p.Source != nil {
			cur.Source = *p.Source
		}
		if err := checkMeta(&cur); err != nil {
			return err
		}
		rw, err = s.rewriteTxn(txn, ix, old, cur, vec)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidUTF8) {
			return Memory{}, err
		}
		if errors.Is(err, bg.ErrTxnTooBig) {
			err = fmt.Errorf("%w: %d distinct index terms do not fit one transaction (%v)", ErrTooLarge, len(rw.newTF), err)
		}
		return Memory{}, fmt.Errorf("textmem: update %s in cube %s: %w", id, cube, err)
	}
	ix.mu.Lock()
	rw.apply(ix)
	ix.mu.Unlock()
	return rw.cur, nil
}

// rewrite is a committed new version of a memory, to apply to the index.
type rewrite struct {
	cur          Memory
	oldTF, newTF map[string]int
	meta         docMeta
	vec          []float32
}

// apply updates ix after the rewrite committed; the caller holds ix.mu.
func (rw rewrite) apply(ix *cubeIndex) {
	ix.replaceDoc(rw.cur.ID, rw.oldTF, rw.newTF, rw.meta)
	if n, ok := ix.byID[rw.cur.ID]; ok && rw.vec != nil && ix.vec != nil {
		ix.vec.Add(n, rw.vec)
	}
}

// rewriteTxn stores next (old with changed text or tags) as the new version
// of old inside txn: old goes to history, next gets Version+1 and Updated
// now, postings, doc record, duplicate key, vector and stats follow. The
// caller holds ix.writeMu.
func (s *Store) rewriteTxn(txn *bg.Txn, ix *cubeIndex, old, next Memory, vec []float32) (rewrite, error) {
	cube, id := old.Cube, old.ID
	next.Version = old.Version + 1
	next.Updated = s.opts.Now().UTC()
	rw := rewrite{cur: next, vec: vec}
	var dl, oldDL int
	rw.oldTF, oldDL = termFreqs(s.opts.Analyzer, old.Text)
	rw.newTF, dl = termFreqs(s.opts.Analyzer, next.Text)
	rw.meta = metaOf(next, dl)
	if err := setJSON(txn, histKey(cube, id, old.Version), old); err != nil {
		return rw, err
	}
	if err := setJSON(txn, nsKey(cube, nsMem, id), next); err != nil {
		return rw, err
	}
	if err := txn.Set(nsKey(cube, nsDoc, id), rw.meta.encode()); err != nil {
		return rw, err
	}
	for t := range rw.oldTF {
		if _, ok := rw.newTF[t]; !ok {
			if err := txn.Delete(postKey(cube, t, id)); err != nil {
				return rw, err
			}
		}
	}
	for t, c := range rw.newTF {
		if err := txn.Set(postKey(cube, t, id), binary.AppendUvarint(nil, uint64(c))); err != nil {
			return rw, err
		}
	}
	if err := s.moveHash(txn, cube, id, old, next); err != nil {
		return rw, err
	}
	if vec != nil {
		if err := txn.Set(nsKey(cube, nsVec, id), encodeVector(s.opts.Embedder.Name(), vec)); err != nil {
			return rw, err
		}
	}
	ix.mu.RLock()
	st := cubeStats{analyzer: s.opts.Analyzer.Name(), docs: uint64(ix.live),
		totalLen: uint64(ix.totalLen - int64(oldDL) + int64(dl))}
	ix.mu.RUnlock()
	return rw, txn.Set(statsKey(cube), st.encode())
}

// moveHash points the duplicate key at cur's content, dropping old's key
// if it was this memory's. A content already owned by another memory keeps
// its owner.
func (s *Store) moveHash(txn *bg.Txn, cube, id string, old, cur Memory) error {
	if err := s.dropHash(txn, cube, id, old); err != nil {
		return err
	}
	hk := nsKey(cube, nsHash, contentHash(cur.Text, cur.EventTime))
	_, err := txn.Get(hk)
	if errors.Is(err, bg.ErrKeyNotFound) {
		return txn.Set(hk, []byte(id))
	}
	return err
}

func (s *Store) dropHash(txn *bg.Txn, cube, id string, m Memory) error {
	hk := nsKey(cube, nsHash, contentHash(m.Text, m.EventTime))
	item, err := txn.Get(hk)
	if errors.Is(err, bg.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return err
	}
	if string(v) == id {
		return txn.Delete(hk)
	}
	return nil
}

// History returns every version of memory id, oldest first; the last is
// the current one.
func (s *Store) History(ctx context.Context, cube, id string) ([]Memory, error) {
	if err := checkCube(cube); err != nil {
		return nil, err
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Memory
	err := s.db.View(func(txn *bg.Txn) error {
		cur, err := getMemory(txn, cube, id)
		if err != nil {
			return err
		}
		it := txn.NewIterator(bg.IteratorOptions{Prefix: histPrefix(cube, id), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var m Memory
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &m) }); err != nil {
				return err
			}
			out = append(out, m)
		}
		out = append(out, cur)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Delete removes memory id of cube: its text, history, index postings,
// vector and duplicate key, in one transaction. Then Options.OnDelete is
// called.
func (s *Store) Delete(ctx context.Context, cube, id string) error {
	ix, err := s.index(ctx, cube)
	if err != nil {
		return err
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if err := s.checkOpen(); err != nil {
		return err
	}
	var tf map[string]int
	err = s.db.Update(func(txn *bg.Txn) error {
		old, err := getMemory(txn, cube, id)
		if err != nil {
			return err
		}
		var dl int
		tf, dl = termFreqs(s.opts.Analyzer, old.Text)
		for t := range tf {
			if err := txn.Delete(postKey(cube, t, id)); err != nil {
				return err
			}
		}
		for _, k := range [][]byte{nsKey(cube, nsMem, id), nsKey(cube, nsDoc, id), nsKey(cube, nsVec, id)} {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		it := txn.NewIterator(bg.IteratorOptions{Prefix: histPrefix(cube, id)})
		var hist [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			hist = append(hist, it.Item().KeyCopy(nil))
		}
		it.Close()
		for _, k := range hist {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		if err := s.dropHash(txn, cube, id, old); err != nil {
			return err
		}
		ix.mu.RLock()
		st := cubeStats{analyzer: s.opts.Analyzer.Name(), docs: uint64(ix.live - 1),
			totalLen: uint64(ix.totalLen - int64(dl))}
		ix.mu.RUnlock()
		return txn.Set(statsKey(cube), st.encode())
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return err
		}
		return fmt.Errorf("textmem: delete %s in cube %s: %w", id, cube, err)
	}
	ix.mu.Lock()
	ix.removeDoc(id, tf)
	ix.mu.Unlock()
	if s.opts.OnDelete != nil {
		s.opts.OnDelete(cube, id)
	}
	return nil
}

// Cubes returns the names of the cubes that hold at least one memory,
// sorted.
func (s *Store) Cubes(ctx context.Context) ([]string, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	out := []string{}
	err := s.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte("t/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := it.Item().Key()[2:]
			slash := bytes.IndexByte(k, '/')
			if slash <= 0 {
				it.Next()
				continue
			}
			cube := string(k[:slash])
			mem := nsPrefix(cube, nsMem)
			it.Seek(mem)
			if it.Valid() && bytes.HasPrefix(it.Item().Key(), mem) && ValidCube(cube) {
				out = append(out, cube)
			}
			// '0' is the byte after '/': the first key past "t/<cube>/...".
			it.Seek([]byte("t/" + cube + "0"))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("textmem: cubes: %w", err)
	}
	sort.Strings(out)
	return out, nil
}

// DeleteCube removes every memory and index record of cube, then calls
// Options.OnDelete for each removed memory. Deleting an unknown cube is not
// an error. Large cubes are deleted in several transactions, memory records
// first: after a crash part way the cube lists no memories and a repeated
// DeleteCube removes the index records left over.
func (s *Store) DeleteCube(ctx context.Context, cube string) error {
	ix, err := s.index(ctx, cube)
	if err != nil {
		return err
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if err := s.checkOpen(); err != nil {
		return err
	}
	ix.mu.RLock()
	var ids []string
	for _, d := range ix.docs {
		if d.live {
			ids = append(ids, d.id)
		}
	}
	ix.mu.RUnlock()
	err = s.dropPrefix(ctx, nsPrefix(cube, nsMem))
	if err == nil {
		err = s.dropPrefix(ctx, cubePrefix(cube))
	}
	ix.mu.Lock()
	ix.reset()
	if err != nil {
		ix.loaded = false // reload what is left on next use
	}
	ix.mu.Unlock()
	if err != nil {
		return fmt.Errorf("textmem: delete cube %s: %w", cube, err)
	}
	if s.opts.OnDelete != nil {
		for _, id := range ids {
			s.opts.OnDelete(cube, id)
		}
	}
	return nil
}
