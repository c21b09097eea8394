package kvcache

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Shared is a pack store that several memosrt nodes share (Redis:
// package kvcache/redis). It sits behind the node's RAM cache and Badger: a node stores
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

// ErrSharedRefused wraps an error the shared store answered with (a bad
// password, a database index it does not have, out of memory): the store
// is up but refuses. Connection errors and timeouts do not wrap it.
var ErrSharedRefused = errors.New("kvcache: shared store refused")

// namespaced puts every id and chain hash of a Shared under ns: nodes with
// different keys (SharedKey) never write, find or delete each other's
// values, instead of overwriting each other's records under the same
// content address.
type namespaced struct {
	Shared
	ns string
}

func (n namespaced) ids(in []string) []string {
	out := make([]string, len(in))
	for i, x := range in {
		out[i] = n.ns + x
	}
	return out
}

func (n namespaced) Put(ctx context.Context, id string, record, blob []byte, chain []string) error {
	return n.Shared.Put(ctx, n.ns+id, record, blob, n.ids(chain))
}

func (n namespaced) Deepest(ctx context.Context, keys []string, max int) ([]string, int, error) {
	ids, d, err := n.Shared.Deepest(ctx, n.ids(keys), max)
	out := ids[:0]
	for _, id := range ids {
		if x, ok := strings.CutPrefix(id, n.ns); ok {
			out = append(out, x)
		}
	}
	return out, d, err
}

func (n namespaced) Records(ctx context.Context, ids []string) ([][]byte, error) {
	return n.Shared.Records(ctx, n.ids(ids))
}

func (n namespaced) Blob(ctx context.Context, id string) ([]byte, error) {
	return n.Shared.Blob(ctx, n.ns+id)
}

func (n namespaced) Delete(ctx context.Context, id string, chain []string) error {
	return n.Shared.Delete(ctx, n.ns+id, n.ids(chain))
}

func (n namespaced) Watch(ctx context.Context, fn func(id string), gap func()) {
	n.Shared.Watch(ctx, func(id string) {
		if x, ok := strings.CutPrefix(id, n.ns); ok {
			fn(x)
		}
	}, gap)
}

// sharedMaxCandidates bounds the records a lookup reads from the shared
// level: the packs under one chain hash that could share the longest prefix.
const sharedMaxCandidates = 16

// sharedRetry is the period of the shared level's health check: after an
// error that did not reach the store (connection refused, timeout),
// requests use the node's own levels and prefill until a check succeeds,
// and none waits for a dead or hung server.
const sharedRetry = time.Second

// sharedLookupTimeout bounds a lookup's round trips and a health check: a
// lookup is on the request path, so a hung store costs a request at most
// this, once (the level is then down until a check succeeds).
const sharedLookupTimeout = 250 * time.Millisecond

// SharedStats reports the shared level since Open.
type SharedStats struct {
	Enabled bool  `json:"enabled"`
	Up      bool  `json:"up"`      // the last operation or health check succeeded
	Hits    int64 `json:"hits"`    // packs found there (no local copy)
	Misses  int64 `json:"misses"`  // a record found whose blob was gone (evicted) or does not open under this node's key: prefilled
	Puts    int64 `json:"puts"`    // packs written there
	Errors  int64 `json:"errors"`  // failed operations and health checks (server down, timeout, a refusal such as OOM)
	Deletes int64 `json:"deletes"` // packs dropped here because a node deleted them
	Gaps    int64 `json:"gaps"`    // times deletions may have been missed (remote records then forgotten)
}

// sharedState is the cache's view of its shared level.
type sharedState struct {
	s       Shared
	aead    cipher.AEAD   // nil: plaintext
	timeout time.Duration // transfers (Put, Blob, Delete)
	cancel  context.CancelFunc
	// resync, set by the cache, writes the packs stored while the level
	// was down once it is up again
	resync func(since time.Time)
	downAt atomic.Int64 // unix ns the level went down (0: up)

	down    atomic.Bool // the last operation or health check failed to reach it
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
		h := sha256.Sum256(append([]byte("memosrt shared namespace\x00"), key...))
		st.s = namespaced{Shared: s, ns: "k" + hex.EncodeToString(h[:8]) + ":"}
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

// up reports whether operations may go to the shared level. While it is
// down they are skipped, so no request waits for a dead or hung store;
// only the health check (every sharedRetry) tries it, and brings it back.
func (s *sharedState) up() bool { return !s.down.Load() }

// fail records an operation's outcome. An error that did not reach the
// store (refused connection, timeout) takes the level down; an answer,
// ErrNotFound or a refusal (ErrSharedRefused: out of memory, say) leaves
// it up, the refusal counted as an error.
func (s *sharedState) fail(err error) {
	switch {
	case err == nil || errors.Is(err, ErrNotFound):
		s.setUp()
	case errors.Is(err, ErrSharedRefused):
		s.errs.Add(1)
		s.setUp()
	default:
		s.errs.Add(1)
		if s.down.CompareAndSwap(false, true) {
			s.downAt.Store(time.Now().UnixNano())
		}
	}
}

// setUp marks the level up; after an outage it writes the packs stored
// meanwhile (resync), in the background.
func (s *sharedState) setUp() {
	if s.down.CompareAndSwap(true, false) {
		since := time.Unix(0, s.downAt.Swap(0))
		if s.resync != nil {
			go s.resync(since)
		}
	}
}

// check pings the store and records the outcome.
func (s *sharedState) check() {
	ctx, cancel := context.WithTimeout(context.Background(), sharedLookupTimeout)
	defer cancel()
	s.fail(s.s.Ping(ctx))
}

// health checks the store every sharedRetry, so that SharedStats.Up (and
// /metrics) says within about a second when it goes down or comes back,
// with or without traffic.
func (s *sharedState) health(ctx context.Context) {
	t := time.NewTicker(sharedRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.check()
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
	ctx, cancel := context.WithTimeout(context.Background(), sharedLookupTimeout)
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

// resyncShared writes the packs this node stored since the shared level
// went down (their Put skipped it), so that other nodes find them too.
func (c *Cache) resyncShared(since time.Time) {
	c.mu.Lock()
	var recs []*packRecord
	for _, rec := range c.packs {
		if !rec.remote && !rec.Header.Created.Before(since.Add(-time.Second)) {
			recs = append(recs, rec)
		}
	}
	c.mu.Unlock()
	for _, rec := range recs {
		if !c.shared.up() {
			return // down again: the next recovery writes them
		}
		c.writeMu.Lock()
		blob, err := c.Blob(rec.ID)
		if err == nil {
			c.sharedPut(rec, blob)
		}
		c.writeMu.Unlock()
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
