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
	"sync/atomic"
	"time"

	"github.com/memosrt/memosrt/datadir"
)

// Store is the text tier over one Backend. It is safe for concurrent use.
// Over the Badger backend only one Store may be open per database at a
// time: it keeps an in-memory image of each cube's index that other
// writers would not update. Over a Backend that is a Watcher (PostgreSQL)
// any number of Stores, in any processes, may share it: each reloads a
// cube's index when another commits a change to that cube.
type Store struct {
	be   Backend
	opts Options
	log  *slog.Logger
	stop func() // ends the Watch; nil without a Watcher

	damaged atomic.Int64 // damaged records met (Damaged)

	// mu guards closed, cubes and lastNanos.
	mu        sync.Mutex
	closed    bool
	cubes     map[string]*cubeIndex
	lastNanos uint64
}

// Open returns a Store over the embedded database db (NewBadgerBackend).
// It loads no cube until that cube is first used. The Store does not own
// db: Close leaves it open.
func Open(db *datadir.DB, opts Options) (*Store, error) {
	if db == nil || db.Badger() == nil {
		return nil, errors.New("textmem: nil database")
	}
	return OpenBackend(NewBadgerBackend(db), opts)
}

// OpenBackend returns a Store over be. When be is a Watcher the Store
// follows other writers' changes (see Store). The Store does not own be:
// Close leaves it open.
func OpenBackend(be Backend, opts Options) (*Store, error) {
	if be == nil {
		return nil, errors.New("textmem: nil backend")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	s := &Store{
		be:    be,
		opts:  opts,
		log:   opts.Logger.With("tier", "text"),
		cubes: make(map[string]*cubeIndex),
	}
	if w, ok := be.(Watcher); ok {
		s.stop = w.Watch(s.changed)
	}
	return s, nil
}

// Damaged returns how many damaged records (ErrDamaged) the Store has
// met since Open, and cubes whose index found fewer memory records than
// its statistics count (records lost from a damaged SST block, which
// Badger's iterators skip without an error). Each was logged at level
// Error with the cube and what was lost.
func (s *Store) Damaged() int64 { return s.damaged.Load() }

// IndexStats describes the in-memory indexes a Store holds: one for each
// cube used since it opened (a deleted cube's stays, empty).
type IndexStats struct {
	Cubes    int   // cubes whose index is loaded
	Memories int   // live memories in those indexes
	Bytes    int64 // estimated heap of those indexes, bytes (see below)
}

// IndexStats sums the loaded indexes. Bytes is an estimate from the
// indexes' lengths (cubeIndex.heapBytes: slices at capacity, maps at a
// slot of their key and element an entry at 3/4 load, every kept string's
// bytes, FlatIndex vectors), not a heap measurement (BenchmarkIndexHeap
// sets the two side by side); it grows with the
// memories, their distinct terms and, until the cube is next loaded, one
// slot per deleted memory. It reads every loaded index (O(memories + terms),
// each under its read lock): for a metric scraped every few seconds, not a
// request path. Zero after Close.
func (s *Store) IndexStats() IndexStats {
	s.mu.Lock()
	ixs := make([]*cubeIndex, 0, len(s.cubes))
	for _, ix := range s.cubes {
		ixs = append(ixs, ix)
	}
	s.mu.Unlock()
	var st IndexStats
	for _, ix := range ixs {
		ix.mu.RLock()
		if ix.loaded {
			st.Cubes++
			st.Memories += ix.live
			st.Bytes += ix.heapBytes()
		}
		ix.mu.RUnlock()
	}
	return st
}

// noteDamage logs and counts err when it wraps ErrDamaged, and returns it.
func (s *Store) noteDamage(cube string, err error) error {
	if errors.Is(err, ErrDamaged) {
		s.damaged.Add(1)
		s.log.Error("damaged record: not served", "cube", cube, "err", err)
	}
	return err
}

// Backend returns the Backend the Store keeps its records in.
func (s *Store) Backend() Backend { return s.be }

// changed marks the index of c's cube (every cube with c.All) stale, so
// that its next use reloads it from the Backend; a deleted cube also gets
// Options.OnCubeDeleted.
func (s *Store) changed(c Change) {
	s.mu.Lock()
	var stale []*cubeIndex
	for name, ix := range s.cubes {
		if c.All || name == c.Cube {
			stale = append(stale, ix)
		}
	}
	s.mu.Unlock()
	for _, ix := range stale {
		ix.mu.Lock()
		if len(c.IDs) > 0 && !c.All && !c.Deleted && len(ix.pending) < 1024 {
			if ix.pending == nil {
				ix.pending = map[string]bool{}
			}
			for _, id := range c.IDs {
				ix.pending[id] = true
			}
		} else {
			ix.stale = true
		}
		ix.mu.Unlock()
	}
	if c.Deleted && c.Cube != "" && s.opts.OnCubeDeleted != nil {
		s.opts.OnCubeDeleted(c.Cube)
	}
	if c.All && s.opts.OnResync != nil {
		s.opts.OnResync()
	}
	s.log.Debug("text store changed elsewhere", "cube", c.Cube, "all", c.All, "deleted", c.Deleted)
}

// Close releases the in-memory indexes. Later calls return ErrClosed.
// Idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
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
	ix.mu.RLock()
	stale, pending := ix.stale || !ix.loaded, len(ix.pending) > 0
	ix.mu.RUnlock()
	if !stale && pending {
		if err := s.refresh(ctx, cube, ix); err != nil {
			return nil, err
		}
		return ix, nil
	}
	if err := s.load(ctx, cube, ix); err != nil {
		return nil, err
	}
	return ix, nil
}

// checkRecord is Options.RequireRecord's check inside a write txn.
func (s *Store) checkRecord(txn Txn) error {
	if !s.opts.RequireRecord {
		return nil
	}
	if rc, ok := txn.(RecordChecker); ok {
		return rc.CheckRecord()
	}
	return nil
}

// touch tells other processes sharing the Backend that txn changed memory
// id (Toucher).
func touch(txn Txn, id string) {
	if t, ok := txn.(Toucher); ok {
		t.Touch(id)
	}
}

// refresh re-reads the memories another process changed (ix.pending) and
// applies them to ix as that process did: a memory gone is removed, one
// new or changed is (re)indexed from its stored text. The caller holds
// ix.writeMu.
func (s *Store) refresh(ctx context.Context, cube string, ix *cubeIndex) error {
	ix.mu.Lock()
	ids := make([]string, 0, len(ix.pending))
	for id := range ix.pending {
		ids = append(ids, id)
	}
	ix.pending = nil
	ix.mu.Unlock()
	type got struct {
		m   *Memory
		vec []float32
	}
	read := make([]got, len(ids))
	err := s.be.View(ctx, cube, func(txn Txn) error {
		for i, id := range ids {
			read[i] = got{}
			m, err := getMemory(txn, cube, id)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			read[i].m = &m
			if s.opts.Embedder == nil {
				continue
			}
			v, err := txn.Get(nsKey(nsVec, id))
			if errors.Is(err, ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			name, vec, err := decodeVector(v)
			if err == nil && name == s.opts.Embedder.Name() && len(vec) == s.opts.Embedder.Dim() {
				read[i].vec = vec
			}
		}
		return nil
	})
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err != nil {
		for _, id := range ids { // try again on the next use
			if ix.pending == nil {
				ix.pending = map[string]bool{}
			}
			ix.pending[id] = true
		}
		return fmt.Errorf("textmem: refresh cube %s: %w", cube, err)
	}
	for i, id := range ids {
		n, had := ix.byID[id]
		m := read[i].m
		switch {
		case m == nil && had:
			ix.removeDoc(id, ix.termsOf(n))
			continue
		case m == nil:
			continue
		}
		tf, dl := termFreqs(s.opts.Analyzer, m.Text)
		if had {
			ix.replaceDoc(id, ix.termsOf(n), tf, metaOf(*m, dl)) // keeps doc number n, as the writer did
		} else {
			n = ix.addDoc(id, metaOf(*m, dl))
			for t, c := range tf {
				ix.addPosting(t, n, c)
			}
		}
		if read[i].vec != nil && ix.vec != nil {
			ix.vec.Add(n, read[i].vec)
		}
	}
	s.log.Debug("cube refreshed", "cube", cube, "memories", len(ids))
	return nil
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
	err := s.be.View(ctx, cube, func(txn Txn) error {
		v, err := txn.Get(statsKey())
		if errors.Is(err, ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		hasStats = true
		st, err = decodeStats(v)
		return err
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
	ix.stale = false // a change committed from now on marks it again
	ix.pending = nil // the load reads them as they are now
	err = s.be.View(ctx, cube, func(txn Txn) error {
		// the statistics again, in the snapshot of the docs they count
		hasStats = false
		switch v, err := txn.Get(statsKey()); {
		case err == nil:
			if st, err = decodeStats(v); err != nil {
				return err
			}
			hasStats = true
		case !errors.Is(err, ErrKeyNotFound):
			return err
		}
		// Docs first, so that postings can map ids to doc numbers.
		pre := nsPrefix(nsDoc)
		err := txn.Iterate(pre, false, func(k, v []byte) error {
			id := string(k[len(pre):])
			d, err := decodeDocMeta(v)
			if err != nil {
				return fmt.Errorf("%w: doc %s", err, id)
			}
			ix.addDoc(id, d)
			if len(ix.docs)%4096 == 0 {
				return ctx.Err()
			}
			return nil
		})
		if err != nil {
			return err
		}
		pre = nsPrefix(nsPost)
		count := 0
		err = txn.Iterate(pre, false, func(k, v []byte) error {
			k = k[len(pre):]
			z := bytes.IndexByte(k, 0)
			if z < 0 {
				return fmt.Errorf("%w: posting key %q", errCorrupt, k)
			}
			n, ok := ix.byID[string(k[z+1:])]
			if !ok {
				return nil // posting of a doc whose record is gone; ignore
			}
			tf, m := binary.Uvarint(v)
			if m <= 0 {
				return fmt.Errorf("%w: posting value", errCorrupt)
			}
			ix.addPosting(string(k[:z]), n, int(tf))
			if count++; count%65536 == 0 {
				return ctx.Err()
			}
			return nil
		})
		if err != nil {
			return err
		}
		return s.loadVectors(txn, cube, ix)
	})
	if err != nil {
		ix.reset()
		return fmt.Errorf("textmem: load cube %s: %w", cube, err)
	}
	if hasStats && st.analyzer == s.opts.Analyzer.Name() && st.docs > uint64(ix.live) {
		// written in one transaction with the doc records, read in one
		// snapshot: fewer doc records is damage (a damaged SST block hides
		// its keys without an error)
		s.damaged.Add(1)
		s.log.Error("damaged cube: memory records missing; run memosrt check",
			"cube", cube, "stats_docs", st.docs, "docs", ix.live, "lost", st.docs-uint64(ix.live))
	} else if hasStats && st.analyzer == s.opts.Analyzer.Name() &&
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

// rebuildMark is the analyzer name cube statistics hold while a rebuild
// runs: no Analyzer's, so that a Store of any Analyzer that loads the cube
// in a state the rebuild left before its last write rebuilds it again.
const rebuildMark = "(rebuild unfinished)"

// rebuild rewrites the postings, doc records and stats of cube from its
// stored texts with the current Analyzer, in several commits: first the
// statistics take rebuildMark, then the postings and doc records are
// deleted and written again, and the statistics naming the Analyzer come
// last. So a backup's snapshot or a crash in between leaves a cube that
// the next load rebuilds from its texts (which the rebuild does not
// touch), whichever Analyzer that Store has; without the mark, one with
// the old Analyzer would load the half-deleted index as it is. The
// caller holds the cube's writeMu.
func (s *Store) rebuild(ctx context.Context, cube string) error {
	err := s.be.Update(ctx, cube, func(txn Txn) error {
		return txn.Set(statsKey(), cubeStats{analyzer: rebuildMark}.encode())
	})
	if err != nil {
		return fmt.Errorf("textmem: rebuild cube %s: %w", cube, err)
	}
	for _, ns := range []byte{nsPost, nsDoc} {
		if err := s.be.DeletePrefix(ctx, cube, nsPrefix(ns)); err != nil {
			return fmt.Errorf("textmem: rebuild cube %s: %w", cube, err)
		}
	}
	var st cubeStats
	st.analyzer = s.opts.Analyzer.Name()
	err = s.be.Bulk(ctx, cube, func(put func(k, v []byte) error) error {
		err := s.scanReadable(ctx, cube, func(m Memory) error {
			tf, dl := termFreqs(s.opts.Analyzer, m.Text)
			if err := put(nsKey(nsDoc, m.ID), metaOf(m, dl).encode()); err != nil {
				return err
			}
			for t, c := range tf {
				if err := put(postKey(t, m.ID), binary.AppendUvarint(nil, uint64(c))); err != nil {
					return err
				}
			}
			st.docs++
			st.totalLen += uint64(dl)
			return nil
		})
		if err != nil {
			return err
		}
		return put(statsKey(), st.encode())
	})
	if err != nil {
		return fmt.Errorf("textmem: rebuild cube %s: %w", cube, err)
	}
	return nil
}

// listAround is List's path when a memory record of cube is damaged: it
// reads each memory apart and leaves out, logs and counts the damaged ones.
func (s *Store) listAround(ctx context.Context, cube string) ([]Memory, error) {
	out := []Memory{}
	ids, err := s.memoryIDs(ctx, cube)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		m, err := s.Get(ctx, cube, id) // logs and counts damage
		switch {
		case err == nil:
			out = append(out, m)
		case errors.Is(err, ErrDamaged), errors.Is(err, ErrNotFound):
		default:
			return nil, err
		}
	}
	return out, nil
}

// memoryIDs lists the ids of cube's memory records, keys only.
func (s *Store) memoryIDs(ctx context.Context, cube string) ([]string, error) {
	var ids []string
	err := s.be.View(ctx, cube, func(txn Txn) error {
		pre := nsPrefix(nsMem)
		return txn.Iterate(pre, true, func(k, _ []byte) error {
			ids = append(ids, string(k[len(pre):]))
			return nil
		})
	})
	return ids, err
}

// scanReadable is scanMemories, one read per memory, leaving out the
// memory records that fail (ErrDamaged), each logged and counted.
func (s *Store) scanReadable(ctx context.Context, cube string, fn func(Memory) error) error {
	ids, err := s.memoryIDs(ctx, cube)
	if err != nil {
		return err
	}
	for _, id := range ids {
		var m Memory
		err := s.be.View(ctx, cube, func(txn Txn) error {
			var err error
			m, err = getMemory(txn, cube, id)
			return err
		})
		switch {
		case errors.Is(err, ErrDamaged):
			s.noteDamage(cube, err)
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return err
		default:
			if err := fn(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// scanMemories calls fn with every current memory of cube, in id order.
func (s *Store) scanMemories(ctx context.Context, cube string, fn func(Memory) error) error {
	return s.be.View(ctx, cube, func(txn Txn) error {
		i := 0
		return txn.Iterate(nsPrefix(nsMem), false, func(k, v []byte) error {
			if i++; i%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			var m Memory
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("textmem: memory %s: %w", k, err)
			}
			return fn(m)
		})
	})
}

func getMemory(txn Txn, cube, id string) (Memory, error) {
	var m Memory
	if !validID(id) {
		return m, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	v, err := txn.Get(nsKey(nsMem, id))
	if errors.Is(err, ErrKeyNotFound) {
		return m, fmt.Errorf("%w: %s in cube %s", ErrNotFound, id, cube)
	}
	if err != nil {
		return m, err
	}
	err = json.Unmarshal(v, &m)
	return m, err
}

func setJSON(txn Txn, key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return txn.Set(key, b)
}

// addStats adds docs and length (either may be negative) to cube's stored
// statistics inside txn: read in the transaction, so that writers on
// other nodes (whose in-memory indexes this one does not see) conflict
// instead of overwriting each other's counts.
func (s *Store) addStats(txn Txn, docs, length int64) error {
	st := cubeStats{analyzer: s.opts.Analyzer.Name()}
	v, err := txn.Get(statsKey())
	switch {
	case err == nil:
		old, err := decodeStats(v)
		if err == nil && old.analyzer == st.analyzer {
			st = old
		}
	case !errors.Is(err, ErrKeyNotFound):
		return err
	}
	st.docs = uint64(max(int64(st.docs)+docs, 0))
	st.totalLen = uint64(max(int64(st.totalLen)+length, 0))
	return txn.Set(statsKey(), st.encode())
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
	got, _, err := s.add(ctx, cube, m, false)
	return got, err
}

// What AddOutcome reports Add did.
type AddOutcome int

const (
	Added      AddOutcome = iota // a new memory
	Identical                    // an identical memory existed: nothing stored
	NearMerged                   // merged into a near duplicate as its next version
)

// AddOutcome is Add, also reporting what it did.
func (s *Store) AddOutcome(ctx context.Context, cube string, m Memory) (Memory, AddOutcome, error) {
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
	got, _, err := s.add(ctx, cube, m, true)
	return got, err
}

// add is Add, or with keep Import.
func (s *Store) add(ctx context.Context, cube string, m Memory, keep bool) (Memory, AddOutcome, error) {
	if err := checkText(m.Text, s.opts.MaxTextBytes); err != nil {
		return Memory{}, Added, err
	}
	if err := checkMeta(&m); err != nil {
		return Memory{}, Added, err
	}
	if err := s.checkTermKeys(cube, m.Text); err != nil {
		return Memory{}, Added, err
	}
	ix, err := s.index(ctx, cube)
	if err != nil {
		return Memory{}, Added, err
	}
	vec, err := s.embedText(ctx, m.Text)
	if err != nil {
		return Memory{}, Added, err
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if err := s.checkOpen(); err != nil {
		return Memory{}, Added, err
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

	near := near{}
	if !keep {
		near = s.nearCandidate(ix, m, tf, vec)
	}
	var dup *Memory
	var merged *rewrite
	err = s.be.Update(ctx, cube, func(txn Txn) error {
		dup, merged = nil, nil
		if err := s.checkRecord(txn); err != nil {
			return err
		}
		hk := nsKey(nsHash, contentHash(m.Text, m.EventTime))
		if keep {
			switch _, err := txn.Get(nsKey(nsMem, m.ID)); {
			case err == nil:
				return fmt.Errorf("%w: %s", ErrIDExists, m.ID)
			case !errors.Is(err, ErrKeyNotFound):
				return err
			}
		}
		id, err := txn.Get(hk)
		switch {
		case keep:
			// an archive's memories stand as they are: no duplicate check
		case err == nil:
			old, err := getMemory(txn, cube, string(id))
			if err == nil {
				dup = &old
				return nil
			}
			if !errors.Is(err, ErrNotFound) {
				return err
			}
			// A stale duplicate key: overwrite it below.
		case !errors.Is(err, ErrKeyNotFound):
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
		touch(txn, m.ID)
		if err := setJSON(txn, nsKey(nsMem, m.ID), m); err != nil {
			return err
		}
		if err := txn.Set(nsKey(nsDoc, m.ID), meta.encode()); err != nil {
			return err
		}
		for t, c := range tf {
			if err := txn.Set(postKey(t, m.ID), binary.AppendUvarint(nil, uint64(c))); err != nil {
				return err
			}
		}
		if err := txn.Set(hk, []byte(m.ID)); err != nil {
			return err
		}
		if vec != nil {
			if err := txn.Set(nsKey(nsVec, m.ID), encodeVector(s.opts.Embedder.Name(), vec)); err != nil {
				return err
			}
		}
		return s.addStats(txn, 1, int64(dl))
	})
	if errors.Is(err, ErrTxnTooBig) {
		err = fmt.Errorf("%w: %d distinct index terms do not fit one transaction (%v)", ErrTooLarge, len(tf), err)
	}
	if err != nil {
		return Memory{}, Added, fmt.Errorf("textmem: add to cube %s: %w", cube, err)
	}
	if dup != nil {
		s.log.Debug("duplicate add", "cube", cube, "id", dup.ID)
		return *dup, Identical, nil
	}
	if merged != nil {
		s.log.Debug("near-duplicate merged", "cube", cube, "id", merged.cur.ID, "version", merged.cur.Version)
		ix.mu.Lock()
		merged.apply(ix)
		ix.mu.Unlock()
		return merged.cur, NearMerged, nil
	}
	ix.mu.Lock()
	if _, ok := ix.byID[m.ID]; !ok {
		n := ix.addDoc(m.ID, meta)
		for t, c := range tf {
			ix.addPosting(t, n, c)
		}
		if vec != nil && ix.vec != nil {
			ix.vec.Add(n, vec)
		}
	}
	ix.mu.Unlock()
	return m, Added, nil
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
	err := s.be.View(ctx, cube, func(txn Txn) error {
		var err error
		m, err = getMemory(txn, cube, id)
		if errors.Is(err, ErrNotFound) && validID(id) {
			err = docWithoutMemory(txn, cube, id, err)
		}
		return err
	})
	if err != nil {
		return Memory{}, s.noteDamage(cube, err)
	}
	return m, nil
}

// docWithoutMemory returns an error wrapping ErrDamaged when txn holds the
// doc record of memory id, whose memory record it does not find (Badger
// answers not found for every key of a damaged SST block); notFound
// otherwise. A memory record and its doc record are written and deleted
// in one transaction (Add, Patch, Delete, DeleteCube) and a rebuild writes
// doc records only for memory records that read back, so in one snapshot
// a doc record never outlives its memory but by damage. The loaded index
// is no such witness: it is updated after each commit, so a Get between a
// delete's commit and the index update would see a deletion as damage.
func docWithoutMemory(txn Txn, cube, id string, notFound error) error {
	switch _, err := txn.Get(nsKey(nsDoc, id)); {
	case err == nil:
		return fmt.Errorf("%w: record %sm/%s: indexed but does not read back", ErrDamaged, cubeKeyPrefix(cube), id)
	case errors.Is(err, ErrKeyNotFound):
		return notFound
	default:
		return err
	}
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
	if errors.Is(err, ErrDamaged) {
		out, err = s.listAround(ctx, cube)
	}
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
	// Expires sets Memory.Expires (the zero time: never).
	Expires *time.Time
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
	err = s.be.Update(ctx, cube, func(txn Txn) error {
		if err := s.checkRecord(txn); err != nil {
			return err
		}
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
		if p.Expires != nil {
			cur.Expires = p.Expires.UTC()
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
		if errors.Is(err, ErrTxnTooBig) {
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
func (s *Store) rewriteTxn(txn Txn, ix *cubeIndex, old, next Memory, vec []float32) (rewrite, error) {
	id := old.ID
	next.Version = old.Version + 1
	next.Updated = s.opts.Now().UTC()
	rw := rewrite{cur: next, vec: vec}
	var dl, oldDL int
	rw.oldTF, oldDL = termFreqs(s.opts.Analyzer, old.Text)
	rw.newTF, dl = termFreqs(s.opts.Analyzer, next.Text)
	rw.meta = metaOf(next, dl)
	touch(txn, id)
	if err := setJSON(txn, histKey(id, old.Version), old); err != nil {
		return rw, err
	}
	if err := setJSON(txn, nsKey(nsMem, id), next); err != nil {
		return rw, err
	}
	if err := txn.Set(nsKey(nsDoc, id), rw.meta.encode()); err != nil {
		return rw, err
	}
	for t := range rw.oldTF {
		if _, ok := rw.newTF[t]; !ok {
			if err := txn.Delete(postKey(t, id)); err != nil {
				return rw, err
			}
		}
	}
	for t, c := range rw.newTF {
		if err := txn.Set(postKey(t, id), binary.AppendUvarint(nil, uint64(c))); err != nil {
			return rw, err
		}
	}
	if err := s.moveHash(txn, id, old, next); err != nil {
		return rw, err
	}
	if vec != nil {
		if err := txn.Set(nsKey(nsVec, id), encodeVector(s.opts.Embedder.Name(), vec)); err != nil {
			return rw, err
		}
	}
	return rw, s.addStats(txn, 0, int64(dl)-int64(oldDL))
}

// moveHash points the duplicate key at cur's content, dropping old's key
// if it was this memory's. A content already owned by another memory keeps
// its owner.
func (s *Store) moveHash(txn Txn, id string, old, cur Memory) error {
	if err := s.dropHash(txn, id, old); err != nil {
		return err
	}
	hk := nsKey(nsHash, contentHash(cur.Text, cur.EventTime))
	_, err := txn.Get(hk)
	if errors.Is(err, ErrKeyNotFound) {
		return txn.Set(hk, []byte(id))
	}
	return err
}

func (s *Store) dropHash(txn Txn, id string, m Memory) error {
	hk := nsKey(nsHash, contentHash(m.Text, m.EventTime))
	v, err := txn.Get(hk)
	if errors.Is(err, ErrKeyNotFound) {
		return nil
	}
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
	err := s.be.View(ctx, cube, func(txn Txn) error {
		out = nil
		cur, err := getMemory(txn, cube, id)
		if err != nil {
			return err
		}
		err = txn.Iterate(histPrefix(id), false, func(_, v []byte) error {
			var m Memory
			if err := json.Unmarshal(v, &m); err != nil {
				return err
			}
			out = append(out, m)
			return nil
		})
		if err != nil {
			return err
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
	err = s.be.Update(ctx, cube, func(txn Txn) error {
		old, err := getMemory(txn, cube, id)
		if err != nil {
			return err
		}
		var dl int
		tf, dl = termFreqs(s.opts.Analyzer, old.Text)
		touch(txn, id)
		for t := range tf {
			if err := txn.Delete(postKey(t, id)); err != nil {
				return err
			}
		}
		for _, k := range [][]byte{nsKey(nsMem, id), nsKey(nsDoc, id), nsKey(nsVec, id)} {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		var hist [][]byte
		err = txn.Iterate(histPrefix(id), true, func(k, _ []byte) error {
			hist = append(hist, bytes.Clone(k))
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range hist {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		if err := s.dropHash(txn, id, old); err != nil {
			return err
		}
		return s.addStats(txn, -1, -int64(dl))
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
	return Cubes(ctx, s.be)
}

// Cubes returns the names of the cubes of be that hold at least one
// memory, sorted, without opening a Store over it.
func Cubes(ctx context.Context, be Backend) ([]string, error) {
	all, err := be.Cubes(ctx, nsPrefix(nsMem))
	out := []string{}
	for _, c := range all {
		if ValidCube(c) {
			out = append(out, c)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("textmem: cubes: %w", err)
	}
	sort.Strings(out)
	return out, nil
}

// DeleteCube removes every memory and index record of cube, then calls
// Options.OnDelete for each removed memory. Deleting an unknown cube is not
// an error. The memories go first, up to deleteBatch per transaction, each
// with its doc record and its share of the cube's statistics (so that the
// index never names a memory that is gone: see Get), then the rest of the
// cube's records. After a crash part way the cube holds the memories not
// yet deleted, whole and indexed (all or none of a cube of up to
// deleteBatch memories), and a repeated DeleteCube removes them and the
// records left over.
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
	err = s.deleteMemories(ctx, cube)
	if err == nil {
		err = s.be.DeletePrefix(ctx, cube, nil)
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

// deleteBatch is how many memories DeleteCube deletes per transaction
// (fewer when the backend finds the transaction too big): 256 take about
// 520 entries and 25 KiB of Badger's transaction, which holds 1/7 of its
// memtable, 1638 entries of the smallest (github.com/dgraph-io/badger/v4
// db.go, maxBatchSize and maxBatchCount).
const deleteBatch = 256

// deleteMemories deletes every memory record of cube, each in one
// transaction with its doc record, touching it (Toucher) and taking its
// count and length out of the cube's statistics, deleteBatch memories a
// transaction. The caller holds the cube's writeMu.
func (s *Store) deleteMemories(ctx context.Context, cube string) error {
	var ids []string
	err := s.be.View(ctx, cube, func(txn Txn) error {
		ids = ids[:0]
		pre := nsPrefix(nsMem)
		return txn.Iterate(pre, true, func(k, _ []byte) error {
			ids = append(ids, string(k[len(pre):]))
			return nil
		})
	})
	if err != nil {
		return err
	}
	n := deleteBatch
	for len(ids) > 0 {
		batch := ids[:min(n, len(ids))]
		err := s.be.Update(ctx, cube, func(txn Txn) error {
			var docs, length int64
			for _, id := range batch {
				v, err := txn.Get(nsKey(nsDoc, id))
				switch {
				case err == nil:
					if d, err := decodeDocMeta(v); err == nil {
						docs++
						length += int64(d.length)
					}
				case errors.Is(err, ErrKeyNotFound), errors.Is(err, ErrDamaged):
					// not counted in the statistics; a damaged one goes all the same
				default:
					return err
				}
				touch(txn, id)
				if err := txn.Delete(nsKey(nsMem, id)); err != nil {
					return err
				}
				if err := txn.Delete(nsKey(nsDoc, id)); err != nil {
					return err
				}
			}
			return s.dropStats(txn, docs, length)
		})
		if errors.Is(err, ErrTxnTooBig) && n > 1 {
			n /= 2
			continue
		}
		if err != nil {
			return err
		}
		ids = ids[len(batch):]
	}
	return nil
}

// dropStats takes docs memories of length terms in all out of cube's
// statistics inside txn. Statistics of another analyzer are left as they
// are: the next load rebuilds the index from the memories left.
func (s *Store) dropStats(txn Txn, docs, length int64) error {
	v, err := txn.Get(statsKey())
	if errors.Is(err, ErrKeyNotFound) || errors.Is(err, ErrDamaged) {
		return nil
	}
	if err != nil {
		return err
	}
	st, err := decodeStats(v)
	if err != nil || st.analyzer != s.opts.Analyzer.Name() {
		return nil
	}
	return s.addStats(txn, -docs, -length)
}
