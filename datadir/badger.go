package datadir

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bg "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// ErrClosed is returned by methods of a closed DB.
var ErrClosed = errors.New("badger: closed")

// ErrEncryptionKey is returned by Open when Options.EncryptionKey does not
// open the directory: a wrong key, no key for an encrypted directory, or a
// key for a directory that was created without one. Nothing is read.
var ErrEncryptionKey = errors.New("badger: wrong or missing encryption key")

// DeriveKey returns the 32-byte key for another store than this directory
// that its encryption key protects: SHA-256 of label, a NUL byte and key
// (a distinct label a purpose, so one store's key never opens another's).
// Nil for an empty key.
func DeriveKey(key []byte, label string) []byte {
	if len(key) == 0 {
		return nil
	}
	k := sha256.Sum256(append([]byte(label+"\x00"), key...))
	return k[:]
}

// Options configure Open. The zero value of each field means its default.
type Options struct {
	// Dir is the data directory; created if missing. Required unless InMemory.
	Dir string
	// InMemory keeps everything in RAM (tests, benchmarks). Default false.
	InMemory bool
	// EncryptionKey, when set, turns on Badger's AES encryption at rest.
	// Length 16, 24 or 32 bytes (AES-128/192/256).
	EncryptionKey []byte
	// SyncWrites makes every commit fsync before it returns. Default true
	// (durability of acknowledged writes); set NoSync to turn it off.
	NoSync bool
	// Logger receives Badger's warnings and errors; nil discards them.
	Logger *slog.Logger
	// ValueLogFileSize is the size at which a value-log file is closed and
	// a new one begun, bytes. Space is reclaimed a whole file at a time and
	// never from the file being written, so smaller files give it back
	// sooner. Default 32 MiB (Badger's is 1 GiB), less on a filesystem
	// under 512 MiB: 1/16 of its size rounded down to a power of two, at
	// least 1 MiB (see Room).
	ValueLogFileSize int64
	// MemTableSize is the size of Badger's memtable, bytes; its log file
	// takes up to twice that on disk. It sets the largest transaction
	// (15%), the value threshold (see DB.ValueThreshold) and the heap a
	// flush takes (several times it; see defaultMemTableSize). Default 4
	// MiB, less on a filesystem under 128 MiB (see Open); at least 1 MiB.
	MemTableSize int64
	// NoCompactOnOpen skips Open's reclaiming pass (see Open).
	NoCompactOnOpen bool
	// ReadOnly opens the directory without writing to it (memosrt check):
	// no reclaiming pass, no truncation of a damaged value-log tail, and
	// every write fails. Default false.
	ReadOnly bool
	// NoVerify turns off the checksum verification of every value-log
	// value and SST block read (see ValueThreshold); only for measuring
	// its cost (docs/benchmarks.md). Default false: verified.
	NoVerify bool
}

// MaxValueThreshold is Badger's largest value threshold, bytes: its
// maximum and default (maxValueThreshold in github.com/dgraph-io/badger/v4
// options.go, 1 MiB); Open sets at most lsmValueMax. A value of this size
// or more goes to the value log whatever the memtable size. See
// DB.ValueThreshold.
const MaxValueThreshold = 1 << 20

// maxBatch is the most bytes one Badger transaction holds for a memtable
// of memSize bytes: 15% of it (maxBatchSize in github.com/dgraph-io/badger/v4
// db.go checkAndSetOptions).
func maxBatch(memSize int64) int64 { return memSize * 15 / 100 }

// lsmValueMax is the largest value threshold Open sets, bytes: 32 KiB,
// half textmem's default MaxTextBytes (64 KiB). A memory record of a text
// under about 31 KiB stays in the LSM tree, out of reach of damage to a KV
// pack chunk in the newest value-log file (see ValueThreshold), and every
// KV pack chunk of 32 KiB or more goes to the value log. At 128 KiB the
// 64 to 128 KiB packs of a small model lived in the LSM tree, where a
// replaced or evicted pack is given back only when a compaction reaches
// its table, and every compaction rewrote them: `make soak-mix` at 12
// requests a second kept 428 MiB beside 256 MiB of packs, still growing,
// and Badger's table builders' arenas took 80 MiB (docs/benchmarks.md).
const lsmValueMax = 32 << 10

// valueThreshold is the value threshold Open sets for a memtable of
// memSize bytes: half of Badger's largest transaction (maxBatch), at most
// lsmValueMax: 32 KiB for every memtable size Open picks (1 MiB gives
// 77 KiB before the cap). Badger counts a value under the threshold whole in its
// transaction's size (a larger one as a 12-byte pointer) and refuses a
// transaction of maxBatch bytes or more (ErrTxnTooBig; txn.go checkSize),
// so at maxBatch, the most its option check allows, a value just under
// the threshold could never be written; at half, it commits beside half a
// transaction of other entries.
func valueThreshold(memSize int64) int64 { return min(lsmValueMax, maxBatch(memSize)/2) }

// DB is a memosrt data directory: one Badger database.
type DB struct {
	db       *bg.DB
	dir      string
	vlogSize int64 // value-log file size, bytes
	memSize  int64 // memtable size, bytes
	// threshold is the value threshold (ValueThreshold), bytes
	threshold int64
	log       *slog.Logger
	refused   atomic.Int64  // writes Room refused since Open
	tableDmg  []TableDamage // found by Open (TableDamage); read-only after Open
	// noCompact is set by Open when a table is damaged: Badger runs no
	// compaction, and Reclaim none either; read-only after Open
	noCompact bool
	key       []byte   // Options.EncryptionKey; Backup encrypts under it
	holds     holdGate // Backup's snapshot against HoldBackup's operations

	// reclaimMu serialises Reclaim and guards lastFull: the value log's
	// allocated bytes after the last pass that flushed the memtable
	reclaimMu sync.Mutex
	lastFull  int64
	// lastPass is the value log's allocated bytes when the last Reclaim
	// pass (or Open) ended, bytes (ReclaimDue)
	lastPass atomic.Int64
	// txs counts View's and Write's transactions, so that GC can make a
	// moment without iterators (txGate)
	txs txGate
}

// blockCacheBytes is the size of Badger's block cache (decompressed LSM
// table blocks, on the Go heap), bytes.
const blockCacheBytes = 32 << 20

// Open opens (creating if needed) the database in opts.Dir. The memtable
// is 4 MiB, less on a filesystem under 128 MiB (1/32 of its size rounded
// down to a power of two, at least 1 MiB), so that Room's reserve fits a
// small disk. When the filesystem lacks the space that opening writes
// (the tables flushed from the memtable logs of the last run, the output
// of the compaction Badger starts at open, plus 1 MiB: openNeed),
// Open returns an error wrapping ErrNoSpace and touches nothing: opening
// would otherwise die by SIGBUS in Badger's mapped files.
func Open(opts Options) (*DB, error) {
	if !opts.InMemory && opts.Dir == "" {
		return nil, errors.New("badger: Options.Dir is empty")
	}
	if n := len(opts.EncryptionKey); n != 0 && n != 16 && n != 24 && n != 32 {
		return nil, fmt.Errorf("badger: encryption key is %d bytes, want 16, 24 or 32", n)
	}
	if !opts.InMemory && !opts.ReadOnly {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("badger: %w", err)
		}
		if err := removeEmptyLogs(opts.Dir, opts.Logger); err != nil {
			return nil, err
		}
	}
	var total int64
	if !opts.InMemory {
		free, tot, ok := diskSpace(opts.Dir)
		if ok {
			total = tot
			need, err := openNeed(opts.Dir, opts.ReadOnly)
			if err != nil {
				return nil, fmt.Errorf("badger: %w", err)
			}
			if free < need {
				return nil, noSpace("to open", opts.Dir, free, need)
			}
		}
	}
	// a damaged table must not meet a compaction (scanTables): then Badger
	// runs none while this handle is open; one that does not open at all
	// is refused (checkManifest)
	var pre map[string]tableRead
	compactors := 2
	if !opts.InMemory && len(opts.EncryptionKey) == 0 {
		var err error
		if pre, err = scanTables(opts.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		for _, r := range pre {
			if r.damaged() && !opts.ReadOnly {
				compactors = 0
			}
		}
	}
	memSize, vlogSize := fileSizes(total)
	if opts.ValueLogFileSize != 0 {
		vlogSize = opts.ValueLogFileSize
	}
	if opts.MemTableSize != 0 {
		if opts.MemTableSize < minFileSize {
			return nil, fmt.Errorf("badger: Options.MemTableSize is %d bytes, want at least %d", opts.MemTableSize, minFileSize)
		}
		memSize = opts.MemTableSize
	}
	bo := bg.DefaultOptions(opts.Dir).
		WithValueLogFileSize(vlogSize).
		WithInMemory(opts.InMemory).
		WithSyncWrites(!opts.NoSync).
		WithLogger(slogAdapter{opts.Logger}).
		WithNumVersionsToKeep(1).
		WithMemTableSize(memSize).
		WithValueThreshold(valueThreshold(memSize)).
		WithNumCompactors(compactors).
		// a flushed memtable is compacted at once (Badger: at 5 tables),
		// so that the deletes it holds are counted for the value-log GC
		WithNumLevelZeroTables(1).
		// Badger's default block cache is 256 MiB of heap; the LSM tree
		// of a data directory is small (keys, memories, pack headers)
		WithBlockCacheSize(blockCacheBytes).
		// How tables are built, which bounds the heap Badger keeps for
		// building them. Badger builds every table (a memtable flush, each
		// output of a compaction) in an arena (ristretto's z.Allocator) of
		// twice the table's size and keeps up to eight arenas pooled between
		// builds (z.NewAllocatorPool(8), badger's db.go), each at the
		// largest size it reached. With its defaults an arena outgrows its
		// initial size: a value larger than the 4 KiB block is copied into a
		// block grown to fit it, and the block is copied once more at twice
		// that size when its offsets are appended (builder.go allocate,
		// finishBlock), then Snappy compresses each block into another copy;
		// and tables double in size per level (TableSizeMultiplier 2), so
		// the arenas of a deeper tree double too. Packs of 64 to 128 KiB
		// under the value threshold (a small model's) live in the LSM tree,
		// and the pooled arenas held 196 to 220 MiB in TestCompactionHeap
		// and grew from 43 to 175 MiB over `make soak-mix`
		// (docs/benchmarks.md). So: blocks that every value under the
		// threshold fits without a copy (blockSize); no Snappy (packs are
		// zstd-compressed already; memory texts are small beside them); and
		// every table the memtable's size (BaseTableSize,
		// TableSizeMultiplier 1). TestCompactionHeap then holds 40 to 52
		// MiB.
		WithCompression(options.None).
		WithBlockSize(blockSize).
		WithReadOnly(opts.ReadOnly).
		WithVerifyValueChecksum(!opts.NoVerify).
		WithChecksumVerificationMode(options.OnBlockRead)
	bo.TableSizeMultiplier = 1 // no setter in Badger
	bo.BaseTableSize = memSize
	if opts.NoVerify {
		bo = bo.WithChecksumVerificationMode(options.NoVerification)
	}
	if compactors == 0 {
		// level 0 only grows now: never stall writes on it (Badger: 15)
		bo = bo.WithNumLevelZeroTablesStall(math.MaxInt32)
	}
	if opts.InMemory {
		// no value log in memory: every value stays in the LSM tree, whose
		// limit is Badger's maximum value threshold (1 MiB)
		bo = bo.WithDir("").WithValueDir("")
	}
	if len(opts.EncryptionKey) > 0 {
		bo = bo.WithEncryptionKey(opts.EncryptionKey).WithIndexCacheSize(16 << 20)
	}
	if !opts.InMemory {
		if err := checkManifest(opts.Dir, bo, pre); err != nil {
			return nil, err
		}
	}
	db, err := bg.Open(bo)
	if errors.Is(err, bg.ErrEncryptionKeyMismatch) {
		state := "it is encrypted and no key was given"
		if len(opts.EncryptionKey) > 0 {
			state = fmt.Sprintf("the %d-byte key given is not the one it was created with, or it is not encrypted", len(opts.EncryptionKey))
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrEncryptionKey, opts.Dir, state)
	}
	if err != nil {
		return nil, fmt.Errorf("badger: open %s: %w", opts.Dir, err)
	}
	d := &DB{db: db, vlogSize: vlogSize, memSize: memSize, threshold: db.Opts().ValueThreshold, log: opts.Logger, key: opts.EncryptionKey}
	defer func() { d.lastFull = d.vlogBytes(); d.lastPass.Store(d.lastFull) }()
	if !opts.InMemory {
		d.dir = opts.Dir
		// before reclaim: its compaction would drop a damaged block's
		// keys for good, without a word (Badger's reads skip the block)
		d.noCompact = compactors == 0
		if d.noCompact && opts.Logger != nil {
			opts.Logger.Error("damaged table: compactions are off while this directory is open, so that none drops the keys after a damaged block; stop memosrt, run memosrt check, restore from a backup", "dir", opts.Dir)
		}
		if d.checkTables(opts.Logger, pre) && !d.noCompact && !opts.NoCompactOnOpen && !opts.ReadOnly {
			if err := d.reclaim(); err != nil {
				db.Close()
				return nil, fmt.Errorf("badger: reclaim %s: %w", opts.Dir, err)
			}
		}
	}
	return d, nil
}

// gcRatio is the stale fraction at which a value-log file is rewritten
// (Badger's RunValueLogGC discardRatio; its docs suggest 0.5). A file is
// kept until a quarter of it is stale, so the value log holds at most 4/3
// of its live values (plus the files being written and rewritten), where
// 0.5 allowed twice (`make soak-mix`: docs/benchmarks.md). The price is
// the rewrite: up to three bytes copied per stale byte given back, where
// 0.5 copies at most one.
const gcRatio = 0.25

// sentinelKey is written and dropped by reclaim: DropPrefix of a present
// prefix is Badger's only public way to flush the memtable.
var sentinelKey = []byte("!reclaim")

// reclaim gives back the space of deleted and overwritten values at Open,
// while nothing else writes: it flushes the memtable (DropPrefix, which
// blocks writes meanwhile), compacts the LSM tree to one level (Flatten)
// so that Badger's discard statistics count every stale value, and
// rewrites value-log files at least gcRatio stale until none is left.
// Badger updates discard statistics only when a compaction drops a value,
// so without this a small data directory (whose memtable rarely fills)
// would keep deleted packs on disk for good.
func (d *DB) reclaim() error {
	if err := d.Room(0); err != nil {
		d.warn("reclaiming skipped", err)
		return nil
	}
	if err := d.db.Update(func(txn *bg.Txn) error { return txn.Set(sentinelKey, nil) }); err != nil {
		return err
	}
	if err := d.db.DropPrefix(sentinelKey); err != nil {
		return err
	}
	if err := d.db.Flatten(1); err != nil {
		return err
	}
	_, err := d.GC()
	return err
}

// GC rewrites value-log files of which at least gcRatio is stale (deleted
// or overwritten values, as the discard statistics of past compactions
// count them) until none is left, and returns how many it rewrote. Safe
// while serving: writes go on. Badger's RunValueLogGC. Badger deletes a
// rewritten file once no iterator is open, so after a rewrite GC holds new
// View and Write transactions back until none runs, for at most drainWait
// (txGate).
//
// A rewrite writes up to a value-log file's worth through Badger's mapped
// files, so each one waits for Room: when the disk is short, GC stops and
// returns what it rewrote with a nil error (logged at warn level).
func (d *DB) GC() (int, error) {
	n := 0
	for {
		if err := d.Room(d.vlogSize); err != nil {
			if errors.Is(err, ErrNoSpace) {
				d.warn("value-log rewrite skipped", err)
				return n, nil
			}
			return n, err
		}
		err := d.db.RunValueLogGC(gcRatio)
		switch {
		case err == nil:
			n++
			// after each file, not once at the end of a pass (up to
			// twelve files under `make soak-mix`), so that each
			// rewritten file goes as soon as no iterator is open; the
			// mix's peaks of 15–17 value-log files were the same either
			// way (docs/benchmarks.md)
			if !d.txs.drain() && d.log != nil {
				d.log.Debug("badger: a rewritten value-log file waits for the iterators open", "dir", d.dir)
			}
		case errors.Is(err, bg.ErrNoRewrite), errors.Is(err, bg.ErrRejected):
			return n, nil
		default:
			return n, err
		}
	}
}

// Reclaim is the periodic form of Open's reclaiming pass, for a
// directory being written, and never blocks writes. It runs GC; when that
// rewrote nothing and the value log grew by a file (ValueLogFileSize)
// since the last full pass, it makes Badger count what was deleted since:
// it flushes the memtable (flushMemtable) and waits until the flushed
// table is compacted below level 0 (Options: at once), the compaction
// that counts the stale values; then it runs GC again. Badger counts a
// deleted or overwritten value only when a compaction drops it, and the
// deletes of a serving directory (conversation packs replaced each turn)
// sit in a memtable that fills slowly when the values are in the value log
// (at or over ValueThreshold): with a 1 KiB threshold, twelve minutes of
// mixed traffic grew the value log to 32 files while Reclaim found nothing
// to rewrite. Values under the threshold are given back by Badger's own
// compactions. Returns the files rewritten.
func (d *DB) Reclaim() (int, error) {
	d.reclaimMu.Lock()
	defer d.reclaimMu.Unlock()
	defer func() { d.lastPass.Store(d.vlogBytes()) }()
	n, err := d.GC()
	if err != nil || n > 0 || d.noCompact || d.vlogBytes() < d.lastFull+d.vlogSize {
		return n, err
	}
	// the filler records and their deletes (at most two memtables),
	// then Flatten, which rewrites every table (Room counts them)
	if err := d.Room(2 * d.memSize); err != nil {
		d.warn("compaction skipped", err)
		return 0, nil
	}
	if err := d.flushMemtable(); err != nil {
		return 0, err
	}
	if err := d.waitL0(); err != nil {
		return 0, err
	}
	if err := d.db.Flatten(1); err != nil {
		return 0, err
	}
	n, err = d.GC()
	d.lastFull = d.vlogBytes()
	return n, err
}

// ReclaimDue reports whether the value log has grown by a file
// (ValueLogFileSize) since the last Reclaim pass ended (or Open), so that
// a caller runs Reclaim at the pace of the writes, not only on a timer:
// when every write replaces or evicts a value (packs under a full
// budget), the stale bytes a timer lets pile up are the write rate times
// its period (4.5 MiB/s for a minute is 270 MiB), while a pass per file
// written leaves about one file's worth. Cheap: one readdir and a stat
// per file, no lock. False in memory and on a nil DB.
func (d *DB) ReclaimDue() bool {
	if d == nil || d.dir == "" {
		return false
	}
	return d.vlogBytes() >= d.lastPass.Load()+d.vlogSize
}

// fillerKey prefixes the records flushMemtable writes and deletes.
var fillerKey = []byte("!fill/")

// flushMemtable makes Badger flush its memtable without blocking writes
// (DropPrefix, Badger's only public flush, fails concurrent writes with
// ErrBlockedWrites): it writes filler records of 1000 bytes (kept in the
// memtable, under the value threshold) until Badger begins a new memtable
// log (NNNNN.mem), then deletes them, and waits until the old log is gone
// (flushed to a level-0 table). Writes at most two memtables' worth
// (2 × MemTableSize) and their deletes; the next compaction drops both.
// The caller checks Room for them first.
func (d *DB) flushMemtable() error {
	if d.dir == "" {
		return nil
	}
	first := d.maxMemFile()
	if first < 0 {
		return nil
	}
	val := make([]byte, 1000)
	var keys [][]byte
	for d.maxMemFile() == first {
		if int64(len(keys)*len(val)) >= 2*d.memSize {
			return fmt.Errorf("badger: memtable not flushed after %d filler records", len(keys))
		}
		wb := d.db.NewWriteBatch()
		for range 64 { // 64 KB a batch: under Badger's batch limit at every memtable size

			k := fmt.Appendf(nil, "%s%08d", fillerKey, len(keys))
			keys = append(keys, k)
			if err := wb.Set(k, val); err != nil {
				wb.Cancel()
				return err
			}
		}
		if err := wb.Flush(); err != nil {
			return err
		}
	}
	wb := d.db.NewWriteBatch()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			wb.Cancel()
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	return d.waitFor(func() bool {
		_, err := os.Stat(filepath.Join(d.dir, fmt.Sprintf("%05d.mem", first)))
		return errors.Is(err, os.ErrNotExist)
	}, "memtable flush")
}

// waitL0 waits until level 0 holds no table (Options: a table is
// compacted into the next level as soon as it is flushed).
func (d *DB) waitL0() error {
	return d.waitFor(func() bool {
		for _, t := range d.db.Tables() {
			if t.Level == 0 {
				return false
			}
		}
		return true
	}, "level-0 compaction")
}

// waitFor polls done every 20 ms for up to a minute.
func (d *DB) waitFor(done func() bool, what string) error {
	for start := time.Now(); !done(); time.Sleep(20 * time.Millisecond) {
		if d.db.IsClosed() {
			return ErrClosed
		}
		if time.Since(start) > time.Minute {
			return fmt.Errorf("badger: %s not done after a minute", what)
		}
	}
	return nil
}

// maxMemFile is the number of the newest memtable log (NNNNN.mem) in the
// directory; -1 when there is none.
func (d *DB) maxMemFile() int {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return -1
	}
	best := -1
	for _, e := range ents {
		if num, ok := strings.CutSuffix(e.Name(), ".mem"); ok {
			if n, err := strconv.Atoi(num); err == nil && n > best {
				best = n
			}
		}
	}
	return best
}

// warn logs a skipped background rewrite.
func (d *DB) warn(msg string, err error) {
	if d.log != nil {
		d.log.Warn(msg, "dir", d.dir, "err", err, "src", "badger")
	}
}

// vlogBytes is the allocated size of the value-log files, bytes.
func (d *DB) vlogBytes() int64 {
	return d.filesBytes(func(name string) bool { return filepath.Ext(name) == ".vlog" })
}

// filesBytes sums the allocated blocks of the directory's regular files
// whose names match, bytes; 0 in memory.
func (d *DB) filesBytes(match func(name string) bool) int64 {
	if d.dir == "" {
		return 0
	}
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && match(e.Name()) {
			n += allocated(fi)
		}
	}
	return n
}

// DiskBytes is the disk space the directory's files take now (LSM tables,
// value log, memtables, manifest): their allocated blocks, bytes; 0 in
// memory. Badger's own Size is refreshed once a minute and counts the
// sparse length of open files, so the files are summed here.
func (d *DB) DiskBytes() int64 {
	return d.filesBytes(func(string) bool { return true })
}

// ValueThreshold is the smallest value, in bytes, that Badger keeps in the
// value log rather than in the LSM tree: 32 KiB (lsmValueMax). Values
// under it stay in the LSM tree and its write-ahead log, each block of
// which is checksummed. A memory record (a text of at most textmem's
// default MaxTextBytes, 64 KiB, as JSON) of a text under about 31 KiB is
// under it; a longer one goes to the value log with the KV pack chunks.
// Badger truncates the newest value-log file at its first damaged entry
// when it opens, dropping every value after it: packs, which are
// recomputed, and such large memory records, which then read back as
// damaged (a value past the file's end), never as another text; memosrt
// check names them before that open. In memory (Options.InMemory) every value stays in the LSM tree.
func (d *DB) ValueThreshold() int64 { return d.threshold }

// ValueLogFileSize is the size of one value-log file, bytes (see
// Options.ValueLogFileSize and Open): the largest value Badger takes, so a
// larger value must be stored in parts of at most this size.
func (d *DB) ValueLogFileSize() int64 { return d.vlogSize }

// Update runs fn in a read-write transaction (Badger's DB.Update) once
// Room(0) allows a write: on a disk too full to take one it runs nothing
// and returns Room's error, wrapping ErrNoSpace. Every write of the owner
// packages goes through Update or Write (deletes too: a delete is a
// record in the memtable), except the batched writers that ask Room
// themselves (textmem's Bulk, Restore, the reclaiming pass): Badger's
// memtable and value-log files are mapped, and a write into an
// unallocated page of a full filesystem is SIGBUS.
func (d *DB) Update(fn func(*bg.Txn) error) error { return d.Write(0, fn) }

// Write is Update for a commit of about n bytes (its keys and values), so
// that Room counts them.
func (d *DB) Write(n int64, fn func(*bg.Txn) error) error {
	if err := d.Room(n); err != nil {
		return err
	}
	if err := d.txs.enter(); err != nil {
		return err
	}
	defer d.txs.leave()
	return d.db.Update(fn)
}

// View runs fn in a read-only transaction (Badger's DB.View).
func (d *DB) View(fn func(*bg.Txn) error) error {
	if err := d.txs.enter(); err != nil {
		return err
	}
	defer d.txs.leave()
	return d.db.View(fn)
}

// Badger returns the underlying Badger handle, for reads and for writers
// that ask Room themselves (see Update).
func (d *DB) Badger() *bg.DB { return d.db }

// Close flushes and closes the database. Idempotent. It first waits for
// the transactions View and Write run to end; those called after it
// return ErrClosed.
//
// Closing flushes the memtable into a new table, written through a mapped
// file: on a filesystem without the room for it (MemTableSize and
// spaceMargin), where the write would end the process by SIGBUS, Close
// leaves Badger open and returns an error wrapping ErrNoSpace. Nothing is
// lost: every commit is in the memtable log, which the next Open replays
// (it waits for the room itself). The directory stays locked until the
// process exits.
func (d *DB) Close() error {
	if d.db == nil || d.db.IsClosed() {
		return nil
	}
	d.txs.shut() // View and Write return ErrClosed from here on
	if d.dir != "" && !d.db.Opts().ReadOnly {
		if free, _, ok := diskSpace(d.dir); ok && free < d.memSize+spaceMargin {
			d.warn("closed without flushing the memtable: its log is replayed at the next open", noSpace("in", d.dir, free, d.memSize+spaceMargin))
			return fmt.Errorf("badger: close: memtable not flushed: %w", noSpace("in", d.dir, free, d.memSize+spaceMargin))
		}
	}
	return d.db.Close()
}

type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Errorf(f string, v ...any) {
	if a.l != nil {
		a.l.Error(fmt.Sprintf(f, v...), "src", "badger")
	}
}
func (a slogAdapter) Warningf(f string, v ...any) {
	if a.l != nil {
		a.l.Warn(fmt.Sprintf(f, v...), "src", "badger")
	}
}
func (slogAdapter) Infof(string, ...any)  {}
func (slogAdapter) Debugf(string, ...any) {}

// blockSize is the LSM tables' block size, bytes (Badger: 4 KiB):
// lsmValueMax and 4 KiB for the entry's key and the block's offsets, so
// that every value under the value threshold fits an empty block's buffer
// (see Open's table options). A block is also what one damaged byte in a
// table costs (VerifyTables): up to this many bytes of small records.
const blockSize = lsmValueMax + 4<<10
