package kvcache

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// Shared is a pack store that several memosrt nodes share (Redis:
// OpenRedis). It sits behind the node's RAM cache and Badger: a node stores
// each pack it computes there too, and finds the packs of other nodes there
// when its own levels miss.
//
// Pack ids are content addresses (PackID: scope, tokens, KV config, adapter
// key), so two nodes storing the same pack write the same bytes. A Shared
// may lose any key at any time (Redis's maxmemory eviction): a missing
// record or blob reads as ErrNotFound, which the cache takes as a miss.
type Shared interface {
	// Put stores id's record and blob, then indexes id under each hash of
	// chain (the pack's prefix chain, chainKeys). Readers see the index
	// entries only after the record and the record only after the blob.
	Put(ctx context.Context, id string, record, blob []byte, chain []string) error
	// Deepest returns the ids indexed under the deepest key of keys (keys in
	// chain order, keys[0] the config key) that holds any, at most max of
	// them, and that key's index; depth -1 and no ids when none holds any.
	Deepest(ctx context.Context, keys []string, max int) (ids []string, depth int, err error)
	// Records returns the records of ids, nil for each one that is gone.
	Records(ctx context.Context, ids []string) ([][]byte, error)
	// Blob returns id's blob; ErrNotFound when it is gone.
	Blob(ctx context.Context, id string) ([]byte, error)
	// Delete removes id, its record and its index entries under chain, and
	// tells every node's Watch.
	Delete(ctx context.Context, id string, chain []string) error
	// Watch calls fn with each id any node deletes, until ctx ends. It
	// reconnects on its own and calls gap after a time it was not listening
	// (deletions then may have been missed).
	Watch(ctx context.Context, fn func(id string), gap func())
	// Ping checks the store answers.
	Ping(ctx context.Context) error
	// Close releases the connection.
	Close() error
}

// sharedMaxCandidates bounds the records a lookup reads from the shared
// level: the packs under one chain hash that could share the longest prefix.
const sharedMaxCandidates = 16

// sharedRetry is how long the shared level is left alone after an error
// (connection refused, timeout): requests meanwhile use the node's own
// levels and prefill, and do not each wait for a dead server's timeout.
const sharedRetry = time.Second

// SharedStats reports the shared level since Open.
type SharedStats struct {
	Enabled bool  `json:"enabled"`
	Up      bool  `json:"up"`      // the last operation or health check succeeded
	Hits    int64 `json:"hits"`    // packs found there (no local copy)
	Misses  int64 `json:"misses"`  // a record found whose blob was gone (evicted): prefilled
	Puts    int64 `json:"puts"`    // packs written there
	Errors  int64 `json:"errors"`  // failed operations (server down, timeout, unreadable)
	Deletes int64 `json:"deletes"` // packs dropped here because a node deleted them
	Gaps    int64 `json:"gaps"`    // times deletions may have been missed (remote records then forgotten)
}

// sharedState is the cache's view of its shared level.
type sharedState struct {
	s       Shared
	aead    cipher.AEAD // nil: plaintext
	timeout time.Duration
	cancel  context.CancelFunc

	down    atomic.Bool  // the last operation or ping failed
	retryAt atomic.Int64 // unix ns: while down, operations are skipped until then
	hits    atomic.Int64
	misses  atomic.Int64
	puts    atomic.Int64
	errs    atomic.Int64
	deletes atomic.Int64
	gaps    atomic.Int64
}

func newSharedState(s Shared, key []byte, timeout time.Duration) (*sharedState, error) {
	st := &sharedState{s: s, timeout: timeout}
	if st.timeout <= 0 {
		st.timeout = 2 * time.Second
	}
	if len(key) > 0 {
		blk, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("kvcache: shared key: %w", err)
		}
		if st.aead, err = cipher.NewGCM(blk); err != nil {
			return nil, fmt.Errorf("kvcache: shared key: %w", err)
		}
	}
	return st, nil
}

// up reports whether an operation may go to the shared level: it is up,
// or down for longer than sharedRetry (one operation then tries again).
func (s *sharedState) up() bool {
	return !s.down.Load() || time.Now().UnixNano() >= s.retryAt.Load()
}

// fail counts an error of the shared level and leaves it alone for
// sharedRetry; ErrNotFound is no error (the store answered).
func (s *sharedState) fail(err error) {
	if err == nil || errors.Is(err, ErrNotFound) {
		s.down.Store(false)
		return
	}
	s.errs.Add(1)
	s.retryAt.Store(time.Now().Add(sharedRetry).UnixNano())
	s.down.Store(true)
}

// health pings a shared level that is down every sharedRetry, so that it
// reads up again (SharedStats.Up, /metrics) once the store is back, before
// any request tries it.
func (s *sharedState) health(ctx context.Context) {
	t := time.NewTicker(sharedRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !s.down.Load() {
			continue
		}
		pctx, cancel := s.ctx()
		err := s.s.Ping(pctx)
		cancel()
		s.fail(err)
	}
}

func (s *sharedState) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

// seal encrypts b for the shared level (AES-GCM, random 96-bit nonce
// first) when a key is set: nothing leaves the node in plaintext.
func (s *sharedState) seal(b []byte) []byte {
	if s.aead == nil {
		return b
	}
	out := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(b)+s.aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return s.aead.Seal(out, out, b, nil)
}

// errUnreadable is a shared value that does not open under this node's key
// (another key, or plaintext from a node without one). It proves nothing
// about the pack: it is a miss, and the value is left for the nodes that
// can read it.
var errUnreadable = fmt.Errorf("%w: shared value unreadable with this node's key", ErrNotFound)

func (s *sharedState) open(b []byte) ([]byte, error) {
	if s.aead == nil {
		return b, nil
	}
	n := s.aead.NonceSize()
	if len(b) < n+s.aead.Overhead() {
		return nil, errUnreadable
	}
	out, err := s.aead.Open(nil, b[:n], b[n:], nil)
	if err != nil {
		return nil, errUnreadable
	}
	return out, nil
}

// SharedStats reports the shared level (Enabled false without one).
func (c *Cache) SharedStats() SharedStats {
	s := c.shared
	if s == nil {
		return SharedStats{}
	}
	return SharedStats{Enabled: true, Up: !s.down.Load(), Hits: s.hits.Load(), Misses: s.misses.Load(),
		Puts: s.puts.Load(), Errors: s.errs.Load(), Deletes: s.deletes.Load(), Gaps: s.gaps.Load()}
}

// sharedLookup looks for a pack sharing more than best.Tokens with toks in
// the shared level, at chain depth ≥ max(depth, 1): a match within the first
// block is left to the node's own index (every pack of a config shares the
// config key). A better pack found there joins the local index (remote: its
// blob stays in the shared level until State reads it).
func (c *Cache) sharedLookup(keys []string, toks []int32, best Match, depth int) Match {
	s := c.shared
	if s == nil || !s.up() {
		return best
	}
	from := max(depth, 1)
	if from >= len(keys) || best.Tokens >= (len(keys)-1)*BlockTokens {
		// no deeper block, or the node's own match already spans every
		// whole block of toks: the shared level could add less than a block
		return best
	}
	ctx, cancel := s.ctx()
	defer cancel()
	ids, d, err := s.s.Deepest(ctx, keys[from:], sharedMaxCandidates)
	s.fail(err)
	if err != nil {
		c.log.Warn("kvcache: shared lookup failed; using local levels", "err", err)
		return best
	}
	if d < 0 {
		return best
	}
	var want []string
	c.mu.Lock()
	for _, id := range ids {
		if rec := c.packs[id]; rec != nil {
			if n := commonLen(rec.Header.Tokens, toks); n > best.Tokens {
				best = Match{ID: id, Tokens: n}
			}
			continue
		}
		want = append(want, id)
	}
	c.mu.Unlock()
	if len(want) == 0 {
		return best
	}
	raws, err := s.s.Records(ctx, want)
	s.fail(err)
	if err != nil {
		return best
	}
	var found *packRecord
	for _, raw := range raws {
		if raw == nil {
			continue
		}
		b, err := s.open(raw)
		if err != nil {
			continue
		}
		var rec packRecord
		if json.Unmarshal(b, &rec) != nil || rec.ID != PackID(rec.ConfigKey, rec.Header.Tokens) || rec.ConfigKey != keys[0] {
			continue // not a record of this config (or not one at all)
		}
		if n := commonLen(rec.Header.Tokens, toks); n > best.Tokens {
			best, found = Match{ID: rec.ID, Tokens: n}, &rec
		}
	}
	if found != nil {
		found.remote = true
		c.mu.Lock()
		if c.packs[found.ID] == nil && !c.closed {
			c.index(found)
			c.remoteIDs = append(c.remoteIDs, found.ID)
			c.trimRemote()
		}
		c.mu.Unlock()
	}
	return best
}

// sharedMaxRemote bounds the shared level's records a node keeps in its
// index (their token lists are the index's memory): past it the oldest
// found are forgotten here, and found again by their next lookup.
const sharedMaxRemote = 1024

// trimRemote forgets the oldest remote records past sharedMaxRemote.
// Caller holds mu.
func (c *Cache) trimRemote() {
	for len(c.remoteIDs) > c.maxRemote {
		id := c.remoteIDs[0]
		c.remoteIDs = c.remoteIDs[1:]
		if rec := c.packs[id]; rec != nil && rec.remote {
			c.unindex(id)
		}
	}
	if cap(c.remoteIDs) > 4*c.maxRemote+16 {
		c.remoteIDs = slices.Clone(c.remoteIDs)
	}
}

func commonLen(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// sharedBlob reads a remote pack's blob. A blob that is gone (evicted) or
// unreadable under this node's key unindexes the pack here and reads as
// ErrNotFound: a miss.
func (c *Cache) sharedBlob(rec *packRecord) ([]byte, error) {
	s := c.shared
	if !s.up() {
		return nil, fmt.Errorf("kvcache: shared level down: %w", ErrNotFound)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	raw, err := s.s.Blob(ctx, rec.ID)
	s.fail(err)
	if err == nil {
		raw, err = s.open(raw)
	}
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			s.misses.Add(1)
		} else {
			err = fmt.Errorf("kvcache: shared read: %v: %w", err, ErrNotFound)
		}
		c.mu.Lock()
		if r := c.packs[rec.ID]; r != nil && r.remote {
			c.unindex(rec.ID)
		}
		c.mu.Unlock()
		return nil, err
	}
	s.hits.Add(1)
	return raw, nil
}

// sharedPut writes a pack this node stored to the shared level. A failure
// is counted and logged, never the Put's error: the node's own levels hold
// the pack.
func (c *Cache) sharedPut(rec *packRecord, blob []byte) {
	s := c.shared
	if s == nil || !s.up() {
		return
	}
	rj, _ := json.Marshal(rec)
	ctx, cancel := s.ctx()
	defer cancel()
	err := s.s.Put(ctx, rec.ID, s.seal(rj), s.seal(blob), chainKeys(rec.ConfigKey, rec.Header.Tokens))
	s.fail(err)
	if err != nil {
		c.log.Warn("kvcache: pack not written to the shared level", "pack", rec.ID[:12], "err", err)
		return
	}
	s.puts.Add(1)
}

// sharedDelete removes a pack from the shared level (best effort).
func (c *Cache) sharedDelete(rec *packRecord) {
	s := c.shared
	if s == nil || !s.up() {
		return
	}
	ctx, cancel := s.ctx()
	defer cancel()
	err := s.s.Delete(ctx, rec.ID, chainKeys(rec.ConfigKey, rec.Header.Tokens))
	s.fail(err)
	if err != nil {
		c.log.Warn("kvcache: pack not deleted from the shared level", "pack", rec.ID[:12], "err", err)
	}
}

// watchShared drops remote packs that another node deleted, and checks the
// health of a shared level that is down.
func (c *Cache) watchShared(ctx context.Context) {
	go c.shared.health(ctx)
	c.shared.s.Watch(ctx, func(id string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if rec := c.packs[id]; rec != nil && rec.remote {
			c.unindex(id)
			c.shared.deletes.Add(1)
		}
	}, func() {
		// deletions may have been missed: forget every remote record (the
		// next lookups find those still there)
		c.shared.gaps.Add(1)
		c.mu.Lock()
		defer c.mu.Unlock()
		for id, rec := range c.packs {
			if rec.remote {
				c.unindex(id)
			}
		}
		c.remoteIDs = nil
	})
}
