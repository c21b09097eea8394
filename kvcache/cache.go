package kvcache

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
)

// BlockTokens is the block size of the prefix hash chain, in tokens.
const BlockTokens = 64

// chunkBytes is the largest Badger value a blob is split into, bytes;
// smaller when the data directory's value-log files are (a value must fit
// one: datadir.DB.ValueLogFileSize). A reader concatenates the chunks
// whatever their size.
const chunkBytes = 32 << 20

// Badger keys: headers are the commit point of a pack; chunks are written first.
const (
	keyHeader = "k/h/" // k/h/<id> → packRecord JSON
	keyChunk  = "k/b/" // k/b/<id>/<uint32 BE> → blob bytes
)

// Options configure a Cache. Zero means the default given.
type Options struct {
	// RAMBytes bounds the decompressed states kept in RAM (LRU), bytes,
	// and, apart from them, the state buffers Restore keeps for its next
	// read from Badger (stateBufs). Default 1 GiB.
	RAMBytes int64
	// Logger receives warnings about refused or dropped packs; nil discards.
	Logger *slog.Logger
	// Now returns the current time (tests). Default time.Now.
	Now func() time.Time
	// Shared, when set, is a pack store shared with other nodes (the
	// Redis one is package kvcache/redis):
	// every pack Put here is written there too, and a lookup that the
	// node's own levels cannot answer as well looks there. The caller owns
	// it (Close does not close it).
	Shared Shared
	// SharedKey, when set, encrypts every record and blob before it leaves
	// the node (AES-GCM; 16, 24 or 32 bytes). Nodes sharing a store share
	// the key; a value that does not open under it is a miss.
	SharedKey []byte
	// SharedTimeout bounds each shared-level transfer (Put, Blob, Delete).
	// Default 2 s. Lookups and health checks have their own bound
	// (sharedLookupTimeout, 250 ms): they are on the request path.
	SharedTimeout time.Duration
	// SharedMaxRemote bounds the records of other nodes' packs this node
	// keeps in its index (the oldest found is forgotten first and found
	// again in the shared level when asked for). Default 1024.
	SharedMaxRemote int
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options { return Options{RAMBytes: 1 << 30, Now: time.Now} }

// packRecord is the persisted index entry of one pack.
type packRecord struct {
	ID        string `json:"id"`
	ConfigKey string `json:"config_key"`
	Header    Header `json:"header"`
	BlobBytes int64  `json:"blob_bytes"`
	Chunks    int    `json:"chunks"`
	// remote: found in the shared level; the blob is there, not in Badger
	remote bool
}

// Info describes a stored pack.
type Info struct {
	ID         string    `json:"id"`
	Label      string    `json:"label,omitempty"`
	NTokens    int       `json:"n_tokens"`
	RawBytes   int64     `json:"raw_bytes"`  // decompressed (and, lossy, dequantized) state
	BlobBytes  int64     `json:"blob_bytes"` // on disk
	InRAM      bool      `json:"in_ram"`
	Created    time.Time `json:"created"`
	AdapterKey string    `json:"adapter_key,omitempty"`
	Remote     bool      `json:"remote,omitempty"` // stored by another node: the blob is in the shared level only
	KVCodec    string    `json:"kv_codec"`         // "exact", or the lossy codec ("q8", "q4", "q2": Header.KVCodec)
	// Composed, when set, says the pack was composed from its members'
	// chunks rather than prefilled (Header.Composed): approximate.
	Composed *Composition `json:"composed,omitempty"`
}

// Ratio returns RawBytes/BlobBytes, the compression ratio.
func (i Info) Ratio() float64 {
	if i.BlobBytes == 0 {
		return 0
	}
	return float64(i.RawBytes) / float64(i.BlobBytes)
}

type ramEntry struct {
	id    string
	state []byte
}

// Cache stores packs in Badger and keeps decompressed states in RAM.
type Cache struct {
	db   *datadir.DB // every write through Update or Write, which ask Room first
	opts Options
	log  *slog.Logger

	// writeMu serializes Put and Delete, from their first Badger write to
	// their index update: otherwise a Delete between a Put's chunk writes
	// and its header write leaves a header without chunks.
	writeMu sync.Mutex

	// mu guards packs, chain, lru, ram, ramBytes, closed.
	mu       sync.Mutex
	packs    map[string]*packRecord
	chain    map[string][]string // chain hash at a block boundary → pack ids
	lru      *list.List          // of *ramEntry, front = most recent
	ram      map[string]*list.Element
	ramBytes int64
	closed   bool

	bufs stateBufs // restores' state buffers, kept for the next restore from Badger

	damaged atomic.Int64 // packs deleted because their bytes failed (Damaged)
	reads   readRate     // measured read cost of stored blobs (costRule)
	keepRaw rawRule      // Put's choice of raw over compressed: costRule (benchmarks may set sizeRule)

	shared    *sharedState // nil without Options.Shared
	remoteIDs []string     // remote records in the order found (trimRemote)
	maxRemote int          // Options.SharedMaxRemote
}

// Open loads the pack index from db and removes chunks left without a header
// by an interrupted Put.
func Open(db *datadir.DB, opts Options) (*Cache, error) {
	d := DefaultOptions()
	if opts.RAMBytes == 0 {
		opts.RAMBytes = d.RAMBytes
	}
	if opts.Now == nil {
		opts.Now = d.Now
	}
	if opts.SharedMaxRemote <= 0 {
		opts.SharedMaxRemote = sharedMaxRemote
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cache{db: db, opts: opts, log: log, packs: map[string]*packRecord{},
		chain: map[string][]string{}, lru: list.New(), ram: map[string]*list.Element{}, maxRemote: opts.SharedMaxRemote,
		bufs: stateBufs{limit: opts.RAMBytes}}
	c.keepRaw = c.costRule
	if opts.Shared != nil {
		var err error
		if c.shared, err = newSharedState(opts.Shared, opts.SharedKey, opts.SharedTimeout); err != nil {
			return nil, err
		}
	}
	orphans := map[string]bool{}
	err := c.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyHeader), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var rec packRecord
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &rec) }); err != nil {
				log.Warn("kvcache: unreadable pack record skipped", "key", string(it.Item().Key()), "err", err)
				continue
			}
			c.index(&rec)
		}
		it2 := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyChunk)})
		defer it2.Close()
		for it2.Rewind(); it2.Valid(); it2.Next() {
			k := string(it2.Item().Key())
			if len(k) < len(keyChunk)+64 {
				continue
			}
			id := k[len(keyChunk) : len(keyChunk)+64]
			if c.packs[id] == nil {
				orphans[id] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kvcache: open: %w", err)
	}
	for id := range orphans {
		if c.db.Badger().Opts().ReadOnly { // memosrt check: removed when next opened to write
			break
		}
		log.Info("kvcache: removing orphan chunks", "pack", id[:12])
		if err := c.deleteChunks(id); err != nil {
			return nil, err
		}
	}
	if c.shared != nil {
		c.shared.resync = c.resyncShared
		c.shared.check() // the level starts up or down as the store answers now
		ctx, cancel := context.WithCancel(context.Background())
		c.shared.cancel = cancel
		go c.watchShared(ctx)
	}
	return c, nil
}

// Close drops the RAM cache and the restore buffers. The Badger DB is
// owned by the caller. Idempotent.
func (c *Cache) Close() error {
	if c.shared != nil {
		c.shared.cancel()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.lru.Init()
	c.ram = map[string]*list.Element{}
	c.ramBytes = 0
	c.bufs.drop()
	return nil
}

func chainStep(prev string, block []int32) string {
	h := sha256.New()
	h.Write([]byte(prev))
	var b [4]byte
	for _, t := range block {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// chainKeys returns the chain hash at each block boundary 0, B, 2B, ... ≤ len(toks).
func chainKeys(cfgKey string, toks []int32) []string {
	keys := []string{cfgKey}
	h := cfgKey
	for i := 0; i+BlockTokens <= len(toks); i += BlockTokens {
		h = chainStep(h, toks[i:i+BlockTokens])
		keys = append(keys, h)
	}
	return keys
}

// index adds rec to the in-memory index. Caller holds mu (or is Open).
func (c *Cache) index(rec *packRecord) {
	c.packs[rec.ID] = rec
	for _, k := range chainKeys(rec.ConfigKey, rec.Header.Tokens) {
		c.chain[k] = append(c.chain[k], rec.ID)
	}
}

func (c *Cache) unindex(id string) {
	rec := c.packs[id]
	if rec == nil {
		return
	}
	delete(c.packs, id)
	for _, k := range chainKeys(rec.ConfigKey, rec.Header.Tokens) {
		ids := c.chain[k]
		for i, x := range ids {
			if x == id {
				ids = append(ids[:i], ids[i+1:]...)
				break
			}
		}
		if len(ids) == 0 {
			delete(c.chain, k)
		} else {
			c.chain[k] = ids
		}
	}
	if el, ok := c.ram[id]; ok {
		c.ramBytes -= int64(len(el.Value.(*ramEntry).state))
		c.lru.Remove(el)
		delete(c.ram, id)
	}
}

// PackID returns the id of the pack of toks under a config key.
func PackID(cfgKey string, toks []int32) string {
	return chainStep(cfgKey+"/pack", toks)
}

// Match is the result of a prefix lookup.
type Match struct {
	ID     string // pack id; "" when nothing matched
	Tokens int    // length of the common prefix of the request and the pack
}

// Lookup returns the pack sharing the longest token prefix with toks under
// key: ScopedKey(ConfigKey(live KV config, adapter set), scope). With a
// shared level it looks there too, for a match at least one block
// (BlockTokens) long that beats the node's own; a shared level that does
// not answer is skipped (the node's own match is returned).
func (c *Cache) Lookup(cfgKey string, toks []int32) Match {
	keys := chainKeys(cfgKey, toks)
	c.mu.Lock()
	best, depth := c.lookupLocal(keys, toks)
	c.mu.Unlock()
	if c.shared != nil {
		best = c.sharedLookup(keys, toks, best, depth)
	}
	return best
}

// lookupLocal is Lookup in the node's own index, with the index in keys of
// the deepest chain hash it knows (-1 none). Caller holds mu.
func (c *Cache) lookupLocal(keys []string, toks []int32) (Match, int) {
	// deepest boundary with a known chain hash: candidates share those blocks
	var cands []string
	depth := -1
	for i := len(keys) - 1; i >= 0; i-- {
		if ids := c.chain[keys[i]]; len(ids) > 0 {
			cands, depth = ids, i
			break
		}
	}
	var best Match
	for _, id := range cands {
		if n := commonLen(c.packs[id].Header.Tokens, toks); n > best.Tokens {
			best = Match{ID: id, Tokens: n}
		}
	}
	return best, depth
}

// Info returns the stored pack id, if any.
func (c *Cache) Info(id string) (Info, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.packs[id]
	if rec == nil {
		return Info{}, false
	}
	return c.info(rec), true
}

// Put stores the state of a sequence holding exactly h.Tokens, computed under
// the config h.KV and h.AdapterKey, and returns the pack id. Chunks are
// written before the header, so a crash leaves either the whole pack or
// orphan chunks that the next Open removes. Each write first asks
// datadir.DB.Room: on a disk too full to take it, Put stores nothing and
// returns an error wrapping datadir.ErrNoSpace.
func (c *Cache) Put(ctx context.Context, h Header, state []byte) (Info, error) {
	if h.Created.IsZero() {
		h.Created = c.opts.Now().UTC()
	}
	h.Tokens = slices.Clone(h.Tokens) // the index keeps them
	h, blob, err := encode(h, state, c.keepRaw)
	if err != nil {
		return Info{}, err
	}
	if h.Lossy != nil {
		// what a restore from disk gets: the dequantized state
		if _, state, err = Decode(blob); err != nil {
			return Info{}, err
		}
	}
	cfg := ScopedKey(ConfigKey(h.KV, h.AdapterKey), h.Scope)
	rec := &packRecord{ID: PackID(cfg, h.Tokens), ConfigKey: cfg, Header: h, BlobBytes: int64(len(blob))}
	chunk := chunkBytes
	if v := c.db.ValueLogFileSize(); v > 0 && v < int64(chunk) {
		chunk = int(v)
	}
	rec.Chunks = (len(blob) + chunk - 1) / chunk
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	if old := c.packs[rec.ID]; old != nil && !old.remote {
		// ids are content addresses (config, scope and tokens): the pack is
		// stored already; rewriting it would delete a committed pack that a
		// crash could then leave without its header
		defer c.mu.Unlock()
		c.putRAM(rec.ID, state)
		return c.info(old), nil
	}
	c.mu.Unlock()
	for i := 0; i < rec.Chunks; i++ {
		if err := ctx.Err(); err != nil {
			c.deleteChunks(rec.ID)
			return Info{}, err
		}
		part := blob[i*chunk : min(len(blob), (i+1)*chunk)]
		if err := c.db.Write(int64(len(part)), func(txn *bg.Txn) error { return txn.Set(chunkKey(rec.ID, i), part) }); err != nil {
			c.deleteChunks(rec.ID)
			return Info{}, fmt.Errorf("kvcache: write chunk: %w", err)
		}
	}
	rj, _ := json.Marshal(rec)
	if err := c.db.Write(int64(len(rj)), func(txn *bg.Txn) error { return txn.Set([]byte(keyHeader+rec.ID), rj) }); err != nil {
		c.deleteChunks(rec.ID)
		return Info{}, fmt.Errorf("kvcache: write header: %w", err)
	}
	c.mu.Lock()
	wasRemote := false
	if old := c.packs[rec.ID]; old != nil {
		wasRemote = old.remote
		c.unindex(rec.ID) // a remote record of the same pack: now stored here
	}
	c.index(rec)
	c.putRAM(rec.ID, state)
	info := c.info(rec)
	c.mu.Unlock()
	if !wasRemote {
		c.sharedPut(rec, blob) // after the local commit: the pack is this node's either way
	}
	return info, nil
}

func chunkKey(id string, i int) []byte {
	k := make([]byte, 0, len(keyChunk)+len(id)+5)
	k = append(k, keyChunk...)
	k = append(k, id...)
	k = append(k, '/')
	return binary.BigEndian.AppendUint32(k, uint32(i))
}

func (c *Cache) deleteChunks(id string) error {
	prefix := []byte(keyChunk + id + "/")
	var keys [][]byte
	err := c.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("kvcache: %w", err)
	}
	for _, k := range keys {
		if err := c.db.Update(func(txn *bg.Txn) error { return txn.Delete(k) }); err != nil {
			return fmt.Errorf("kvcache: %w", err)
		}
	}
	return nil
}

// Delete removes a pack: header first (it stops being found), then chunks.
func (c *Cache) Delete(id string) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	return c.delete(id)
}

// delete is Delete; the caller holds writeMu.
func (c *Cache) delete(id string) error {
	c.mu.Lock()
	rec, ok := c.packs[id]
	c.unindex(id)
	c.mu.Unlock()
	if ok {
		c.sharedDelete(rec)
		if rec.remote {
			return nil // nothing of it in Badger
		}
	}
	err := c.db.Update(func(txn *bg.Txn) error { return txn.Delete([]byte(keyHeader + id)) })
	if err != nil {
		return fmt.Errorf("kvcache: %w", err)
	}
	if err := c.deleteChunks(id); err != nil {
		return err
	}
	if !ok {
		return ErrNotFound
	}
	return nil
}

func (c *Cache) putRAM(id string, state []byte) {
	if int64(len(state)) > c.opts.RAMBytes {
		return
	}
	if el, ok := c.ram[id]; ok {
		c.lru.MoveToFront(el)
		return
	}
	c.ram[id] = c.lru.PushFront(&ramEntry{id: id, state: state})
	c.ramBytes += int64(len(state))
	for c.ramBytes > c.opts.RAMBytes {
		el := c.lru.Back()
		e := el.Value.(*ramEntry)
		c.lru.Remove(el)
		delete(c.ram, e.id)
		c.ramBytes -= int64(len(e.state))
	}
}

// Blob reads a pack's stored blob from Badger.
func (c *Cache) Blob(id string) ([]byte, error) {
	c.mu.Lock()
	rec := c.packs[id]
	c.mu.Unlock()
	if rec == nil {
		return nil, ErrNotFound
	}
	if rec.remote {
		return c.sharedBlob(rec)
	}
	blob := make([]byte, 0, rec.BlobBytes)
	err := c.db.View(func(txn *bg.Txn) error {
		for i := 0; i < rec.Chunks; i++ {
			item, err := txn.Get(chunkKey(id, i))
			if errors.Is(err, bg.ErrKeyNotFound) {
				return fmt.Errorf("%w: chunk %d of %d is missing", ErrCorrupt, i, rec.Chunks)
			}
			if err != nil {
				return fmt.Errorf("kvcache: read chunk %d: %w", i, err) // I/O: the pack may be fine
			}
			if err := item.Value(func(v []byte) error {
				if err := datadir.CheckValue(item, v); err != nil {
					return fmt.Errorf("%w: chunk %d of %d: %w", ErrCorrupt, i, rec.Chunks, err)
				}
				blob = append(blob, v...)
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return blob, nil
}

// readState reads a pack's blob from Badger and decodes it chunk by chunk
// as Badger lends each value (partsDecoder): no copy of the blob is made.
// alloc, when not nil, gives the buffers of the state (partsDecoder.alloc).
// Errors wrap ErrCorrupt or ErrVersion for bad bytes, else are I/O.
func (c *Cache) readState(rec *packRecord, alloc func(n int) []byte) (h Header, state []byte, err error) {
	err = c.db.View(func(txn *bg.Txn) error {
		d := newPartsDecoder(int(rec.BlobBytes), &rec.Header)
		defer d.wait() // on every return: the state may go back to stateBufs
		if alloc != nil {
			d.alloc = alloc
		}
		for i := 0; i < rec.Chunks; i++ {
			item, err := txn.Get(chunkKey(rec.ID, i))
			if errors.Is(err, bg.ErrKeyNotFound) {
				return fmt.Errorf("%w: chunk %d of %d is missing", ErrCorrupt, i, rec.Chunks)
			}
			if err != nil {
				return fmt.Errorf("kvcache: read chunk %d: %w", i, err) // I/O: the pack may be fine
			}
			if err := item.Value(func(v []byte) error {
				if err := datadir.CheckValue(item, v); err != nil {
					return fmt.Errorf("%w: chunk %d of %d: %w", ErrCorrupt, i, rec.Chunks, err)
				}
				return d.write(v)
			}); err != nil {
				return err
			}
		}
		h, state, err = d.finish()
		if err == nil && len(d.readNs) >= costMin/readBlock {
			c.reads.add(median(d.readNs))
		}
		return err
	})
	return h, state, err
}

// State returns a pack's header and decompressed state, from RAM if cached,
// else from Badger (then cached). fromRAM reports which.
func (c *Cache) State(id string) (h Header, state []byte, fromRAM bool, err error) {
	c.mu.Lock()
	rec := c.packs[id]
	if rec == nil {
		c.mu.Unlock()
		return h, nil, false, ErrNotFound
	}
	if el, ok := c.ram[id]; ok {
		c.lru.MoveToFront(el)
		st := el.Value.(*ramEntry).state
		c.mu.Unlock()
		return rec.Header, st, true, nil
	}
	c.mu.Unlock()
	if rec.remote {
		blob, err := c.Blob(id)
		if err != nil {
			return h, nil, false, err
		}
		if h, state, err = Decode(blob); err != nil {
			return h, nil, false, err
		}
	} else if h, state, err = c.readState(rec, nil); err != nil {
		return h, nil, false, err
	}
	if err := matchRecord(h, rec); err != nil {
		return h, nil, false, err
	}
	c.mu.Lock()
	if c.packs[id] != nil {
		c.putRAM(id, state)
	}
	c.mu.Unlock()
	return h, state, false, nil
}

// matchRecord checks that h, a blob's header, is the one of its pack
// record rec. Errors wrap ErrCorrupt.
func matchRecord(h Header, rec *packRecord) error {
	if h.TokensHash != rec.Header.TokensHash || h.KV != rec.Header.KV || h.AdapterKey != rec.Header.AdapterKey || h.Scope != rec.Header.Scope ||
		!lossyEq(h.Lossy, rec.Header.Lossy) {
		return fmt.Errorf("%w: blob header does not match its pack record", ErrCorrupt)
	}
	return nil
}

// restoreState is State for Restore: a state in RAM is returned as State
// returns it; one read from Badger is decoded into buffers the cache keeps
// for reuse (stateBufs), which release gives back once the state has been
// restored, and is not cached in RAM (a fresh copy would cost its page
// faults on the request path; the page cache keeps the blob). A remote
// pack goes through State. release is never nil.
func (c *Cache) restoreState(id string) (h Header, state []byte, fromRAM bool, release func(), err error) {
	release = func() {}
	c.mu.Lock()
	rec := c.packs[id]
	if rec == nil {
		c.mu.Unlock()
		return h, nil, false, release, ErrNotFound
	}
	_, inRAM := c.ram[id]
	c.mu.Unlock()
	if inRAM || rec.remote {
		h, state, fromRAM, err = c.State(id)
		return h, state, fromRAM, release, err
	}
	var held [][]byte
	alloc := func(n int) []byte {
		b := c.bufs.take(n)
		held = append(held, b)
		return b
	}
	release = func() {
		for _, b := range held {
			c.bufs.give(b)
		}
		held = nil
	}
	if h, state, err = c.readState(rec, alloc); err == nil {
		err = matchRecord(h, rec)
	}
	if err != nil {
		return h, nil, false, release, err
	}
	return h, state, false, release, nil
}

// Damaged returns how many packs were deleted since Open because their
// stored bytes failed (ErrCorrupt: a checksum, framing, or a chunk that
// does not read back), by Restore or by Check with repair. Each was
// logged at level Warn with its id.
func (c *Cache) Damaged() int64 { return c.damaged.Load() }

// DropRAM evicts every decompressed state from RAM (tests, memory
// pressure). The buffers restores decode into, which hold no pack, stay.
func (c *Cache) DropRAM() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Init()
	c.ram = map[string]*list.Element{}
	c.ramBytes = 0
}

func (c *Cache) info(rec *packRecord) Info {
	_, inRAM := c.ram[rec.ID]
	raw := rec.Header.RawBytes
	if rec.Header.Lossy != nil {
		raw = rec.Header.StateBytes // the state a restore holds, not the quantized stream
	}
	return Info{ID: rec.ID, Label: rec.Header.Label, NTokens: rec.Header.NTokens, RawBytes: raw,
		BlobBytes: rec.BlobBytes, InRAM: inRAM, Created: rec.Header.Created, AdapterKey: rec.Header.AdapterKey,
		Remote: rec.remote, KVCodec: rec.Header.KVCodec(), Composed: rec.Header.Composed}
}

// List returns every pack this node stores, optionally only those with the
// given label. Packs found in the shared level (Info.Remote) are left out:
// budgets, listings and orphan sweeps concern the node's own packs, and a
// node never deletes another node's pack for its own reasons (Info reports
// a remote one by id).
func (c *Cache) List(label string) []Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Info
	for _, rec := range c.packs {
		if rec.remote {
			continue
		}
		if label == "" || rec.Header.Label == label {
			out = append(out, c.info(rec))
		}
	}
	return out
}

// Stats reports bytes held in RAM (packs of the shared level included) and
// on disk, and the number of packs this node stores.
func (c *Cache) Stats() (ramBytes, diskBytes int64, packs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rec := range c.packs {
		if !rec.remote {
			diskBytes += rec.BlobBytes
			packs++
		}
	}
	return c.ramBytes, diskBytes, packs
}
