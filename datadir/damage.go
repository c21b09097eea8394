package datadir

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	bg "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/badger/v4/y"
	"github.com/dgraph-io/ristretto/v2/z"
)

// ErrDamaged is wrapped by errors of reads that met damaged bytes on disk:
// a value-log value or an SST block that fails its checksum, or a value
// pointer past the end of its value-log file (a file truncated after
// damage). Nothing of the damaged record is returned.
var ErrDamaged = errors.New("badger: damaged on disk")

// Damaged reports whether err is a read of damaged bytes: ErrDamaged, or
// one of the errors Badger returns for them (y.ErrChecksumMismatch, from
// value checksums and SST block checksums; y.ErrEOF and "Invalid value
// pointer offset", from a value pointer past the end of a truncated
// value-log file).
func Damaged(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrDamaged) || errors.Is(err, y.ErrChecksumMismatch) || errors.Is(err, y.ErrEOF) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "Invalid value pointer offset") || strings.Contains(s, "checksum mismatch")
}

// ValueCopy returns a copy of item's value, or an error wrapping
// ErrDamaged naming the key when the value could not be read. Badger
// logs a failed value-log read (a checksum mismatch, a value pointer past
// the end of a truncated file) and returns an empty value without an
// error (Item.yieldItemValue in github.com/dgraph-io/badger/v4
// iterator.go), so an empty value whose pointer says it has bytes is
// damage.
func ValueCopy(item *bg.Item) ([]byte, error) {
	v, err := item.ValueCopy(nil)
	if err != nil {
		return nil, err
	}
	if err := CheckValue(item, v); err != nil {
		return nil, err
	}
	return v, nil
}

// CheckValue returns an error wrapping ErrDamaged when v, the value
// Badger gave for item, is empty while item's value pointer says it has
// bytes (see ValueCopy); nil otherwise.
func CheckValue(item *bg.Item, v []byte) error {
	if len(v) == 0 && item.ValueSize() > 0 {
		return fmt.Errorf("%w: value of %q (%d bytes) does not read back", ErrDamaged, item.Key(), item.ValueSize())
	}
	return nil
}

// VlogDamage is one value-log entry that fails its checksum.
type VlogDamage struct {
	File   string // value-log file name, e.g. "000003.vlog"
	Offset int64  // byte offset of the entry in the file
	// Key is the entry's key as stored (Badger appends an 8-byte version);
	// nil when the entry's header is damaged or the file is encrypted.
	Key []byte
	// Rest is true when the damage left the entry's length unreadable:
	// the rest of the file from Offset could not be checked.
	Rest bool
	// Cut, on the first damage of the newest value-log file only, are the
	// entries that read back but go with it: an open to write cuts that
	// file at the end of the last complete transaction before its first
	// damaged entry (valueLog.open in github.com/dgraph-io/badger/v4
	// value.go, logFile.iterate in memtable.go), so the entries of the
	// damaged entry's own transaction before it, and every entry after
	// it. Entries past a Rest damage cannot be read, nor named. Nil on
	// other damage.
	Cut []VlogEntry
}

// VlogEntry is one value-log entry whose checksum holds.
type VlogEntry struct {
	File   string
	Offset int64
	Key    []byte // as stored (with Badger's version); nil when the file is encrypted
}

// vlogHeaderSize is the size of a value-log file's header: an 8-byte
// encryption key id and a 12-byte base IV (vlogHeaderSize in
// github.com/dgraph-io/badger/v4 value.go).
const vlogHeaderSize = 20

// ScanValueLog reads every value-log file of dir (*.vlog) without opening
// the database and returns the entries that fail their CRC-32C (Badger's
// entry layout: meta byte, user-meta byte, uvarint key length, uvarint
// value length, uvarint expiry, key, value, big-endian CRC-32C of all of
// them; header.Encode and safeRead.Entry in value.go). A run of zero bytes
// ends a file (its unwritten tail). Errors are I/O errors only.
func ScanValueLog(dir string) ([]VlogDamage, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil {
		return nil, fmt.Errorf("badger: %w", err)
	}
	slices.Sort(names)
	var out []VlogDamage
	for _, path := range names {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("badger: scan value log: %w", err)
		}
		out = append(out, scanVlog(filepath.Base(path), data, path == names[len(names)-1])...)
	}
	return out, nil
}

// scanVlog checks one value-log file; newest: it is the newest, and its
// first damage gets the entries after it (VlogDamage.Cut).
func scanVlog(name string, data []byte, newest bool) []VlogDamage {
	if len(data) < vlogHeaderSize {
		return nil
	}
	encrypted := binary.BigEndian.Uint64(data[:8]) != 0
	var out []VlogDamage
	// pending are the intact entries of the transaction being read (meta
	// bitTxn) since the last complete one: an open cuts the file at the
	// end of the last complete transaction, so they go with a damaged
	// entry that follows them in the same transaction
	var pending []VlogEntry
	damage := func(off int, key []byte, rest bool) {
		d := VlogDamage{File: name, Offset: int64(off), Key: key, Rest: rest}
		if newest && len(out) == 0 {
			d.Cut = pending
		}
		out = append(out, d)
	}
	off := vlogHeaderSize
	for off < len(data) {
		rest := data[off:]
		if len(rest) < 2 || allZero(rest[:min(len(rest), 16)]) {
			return out
		}
		klen, n1 := binary.Uvarint(rest[2:])
		if n1 <= 0 {
			damage(off, nil, true)
			return out
		}
		vlen, n2 := binary.Uvarint(rest[2+n1:])
		if n2 <= 0 {
			damage(off, nil, true)
			return out
		}
		_, n3 := binary.Uvarint(rest[2+n1+n2:])
		if n3 <= 0 {
			damage(off, nil, true)
			return out
		}
		hlen := 2 + n1 + n2 + n3
		total := uint64(hlen) + klen + vlen + crc32.Size
		if klen > 1<<16 || total > uint64(len(rest)) {
			damage(off, nil, true)
			return out
		}
		body := rest[:total-crc32.Size]
		want := binary.BigEndian.Uint32(rest[total-crc32.Size : total])
		var key []byte
		if !encrypted {
			key = slices.Clone(body[hlen : uint64(hlen)+klen])
		}
		e := VlogEntry{File: name, Offset: int64(off), Key: key}
		switch {
		case crc32.Checksum(body, y.CastagnoliCrcTable) != want:
			damage(off, key, false)
		case newest && len(out) > 0:
			out[0].Cut = append(out[0].Cut, e)
		case rest[0]&bitTxn != 0:
			pending = append(pending, e)
		default: // the end of a transaction, or an entry outside one
			pending = nil
		}
		off += int(total)
	}
	return out
}

// bitTxn marks a value-log entry that is part of a transaction, ended by
// an entry marked bitFinTxn (value.go in github.com/dgraph-io/badger/v4).
const bitTxn = 1 << 6

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// TableDamage is one SST whose keys do not all read back.
type TableDamage struct {
	File  string // SST file name, e.g. "000012.sst"
	Level int    // LSM level of the table
	// From and Through are the table's smallest and largest keys; After
	// is the last key that read back before the damage (nil when none
	// did). The damaged keys lie in (After, Through] (From when After is
	// nil); reads by key (not by iteration) may still find some of them.
	// Keys without Badger's 8-byte version suffix.
	From, After, Through []byte
	Keys, Want           int   // keys read back, keys the table's index counts
	Err                  error // why the table stopped reading, when known
	// Block is the index of the first damaged block (the one reading
	// stopped at), -1 when not known (the table does not open). The
	// table's index keeps each block's first key apart from the block, so
	// the damaged block's keys are known to lie in [BlockFrom, BlockNext),
	// or [BlockFrom, Through] when BlockNext is nil (the last block), even
	// when it is the first block. Keys without Badger's version suffix.
	Block                int
	BlockFrom, BlockNext []byte
}

// VerifyTables reads every key of every SST the database references,
// verifying each block's checksum, and returns the tables whose keys do
// not all read back. Badger's own DB.VerifyChecksum dereferences a nil
// block on the first damaged one (table.VerifyChecksum in v4.9.6), and
// its iterators skip a damaged block without an error, so each table is
// opened apart, read-only (never deleted), and its keys counted against
// the count its index holds. Tables of an encrypted directory are not
// checked (their data keys stay inside Badger). Errors are I/O errors.
// A table that panics Badger's reader is reported as damaged.
func (d *DB) VerifyTables() ([]TableDamage, error) { return d.verifyTables(nil) }

// verifyTables is VerifyTables, taking the reads of the tables that pre
// holds (scanTables before Badger opened: the files are the same) instead
// of reading them again.
func (d *DB) verifyTables(pre map[string]tableRead) ([]TableDamage, error) {
	if d.dir == "" || len(d.db.Opts().EncryptionKey) > 0 {
		return nil, nil
	}
	var out []TableDamage
	var comps map[uint64]options.CompressionType
	for _, ti := range d.db.Tables() {
		name := fmt.Sprintf("%06d.sst", ti.ID)
		td := TableDamage{File: name, Level: ti.Level, From: y.ParseKey(ti.Left), Through: y.ParseKey(ti.Right), Want: int(ti.KeyCount)}
		r, ok := pre[name]
		if !ok {
			if comps == nil {
				comps = tableCompressions(d.dir)
			}
			r = readTable(filepath.Join(d.dir, name), comps)
		}
		n, last, err := r.n, r.last, r.err
		if errors.Is(err, errEncrypted) {
			continue
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("badger: verify tables: %w", err)
		}
		td.Keys, td.After, td.Err = n, last, err
		td.Block, td.BlockFrom, td.BlockNext = r.block, r.blockFrom, r.blockNext
		if err != nil || n != td.Want {
			out = append(out, td)
		}
	}
	return out, nil
}

// TableDamage returns the damaged SSTs Open found (see VerifyTables).
// Open verifies every table before its reclaiming pass and, when one is
// damaged, logs each at level Error and skips the pass, whose compaction
// would drop the damaged block's keys for good without a word.
func (d *DB) TableDamage() []TableDamage { return d.tableDmg }

// checkTables runs VerifyTables for Open and reports whether every table
// verified.
func (d *DB) checkTables(log *slog.Logger, pre map[string]tableRead) bool {
	dmg, err := d.verifyTables(pre)
	if err != nil {
		if log != nil {
			log.Error("badger: verify tables", "dir", d.dir, "err", err)
		}
		return false
	}
	d.tableDmg = dmg
	for _, td := range dmg {
		if log != nil {
			log.Error("damaged table: keys do not read back; run memosrt check", "dir", d.dir, "file", td.File,
				"level", td.Level, "keys", td.Keys, "want", td.Want, "after", string(td.After), "through", string(td.Through), "err", td.Err)
		}
	}
	return len(dmg) == 0
}

var errEncrypted = errors.New("badger: encrypted table")

// tableRead is what readTable found in one SST: the keys that read back
// in order (n), the last of them (without version), the count the table's
// index holds (want; 0 when the table did not open) and the error that
// stopped the open, if any.
type tableRead struct {
	n, want int
	last    []byte
	err     error
	// block is the first damaged block, -1 when unknown; blockFrom and
	// blockNext its first key and the next block's (nil: none), from the
	// table's index (TableDamage.Block)
	block                int
	blockFrom, blockNext []byte
}

// damaged reports whether the table's keys do not all read back (an
// encrypted table, which cannot be read here, is not).
func (r tableRead) damaged() bool {
	if errors.Is(r.err, errEncrypted) {
		return false
	}
	return r.err != nil || r.n != r.want
}

// readTable opens the SST at path read-only and iterates its keys, with
// the block compression the MANIFEST records for it (comps, by table ID;
// Open writes tables without compression, directories written before
// that hold Snappy tables). A table comps does not list is read without
// compression and, if that fails, with Snappy.
func readTable(path string, comps map[uint64]options.CompressionType) tableRead {
	id, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".sst"), 10, 64)
	if c, ok := comps[id]; ok && err == nil {
		return readTableAs(path, c)
	}
	r := readTableAs(path, options.None)
	if r.damaged() {
		if rs := readTableAs(path, options.Snappy); !rs.damaged() {
			return rs
		}
	}
	return r
}

// tableCompressions is the block compression of each table the MANIFEST
// of dir lists, by table ID; nil when it does not read.
func tableCompressions(dir string) map[uint64]options.CompressionType {
	f, err := os.Open(filepath.Join(dir, bg.ManifestFilename))
	if err != nil {
		return nil
	}
	defer f.Close()
	m, _, err := bg.ReplayManifestFile(f, 0, bg.DefaultOptions(dir))
	if err != nil {
		return nil
	}
	out := make(map[uint64]options.CompressionType, len(m.Tables))
	for id, tm := range m.Tables {
		out[id] = tm.Compression
	}
	return out
}

// readTableAs is readTable with the block compression c.
func readTableAs(path string, c options.CompressionType) (r tableRead) {
	defer func() {
		// Badger's table code indexes damaged bytes without bounds
		// checks (flatbuffers offsets of a damaged index): a damaged
		// table, not a programmer error
		if p := recover(); p != nil {
			r.err = fmt.Errorf("%w: %s: %s", ErrDamaged, filepath.Base(path), strings.Join(strings.Fields(fmt.Sprint(p)), " "))
			r.block, r.blockFrom, r.blockNext = -1, nil, nil
		}
	}()
	mf, err := z.OpenMmapFile(path, os.O_RDONLY, 0)
	if err != nil && !errors.Is(err, z.NewFile) {
		return tableRead{err: err, block: -1}
	}
	t, err := table.OpenTable(mf, table.Options{
		ChkMode:     options.OnBlockRead,
		Compression: c,
		BlockSize:   blockSize,
	})
	if err != nil {
		if strings.Contains(err.Error(), "encrypt") {
			return tableRead{err: errEncrypted, block: -1}
		}
		return tableRead{err: fmt.Errorf("%w: %w", ErrDamaged, err), block: -1}
	}
	defer t.MmapFile.Close(-1) // never t.DecrRef to 0: that deletes the file
	if t.KeyID() != 0 {
		return tableRead{err: errEncrypted, block: -1}
	}
	r.want = int(t.KeyCount())
	it := t.NewIterator(0)
	defer it.Close()
	var lastFull []byte // with its version
	for it.Rewind(); it.Valid(); it.Next() {
		r.n++
		lastFull = append(lastFull[:0], it.Key()...)
	}
	if r.n > 0 {
		r.last = slices.Clone(y.ParseKey(lastFull))
	}
	r.block = -1
	if r.n != r.want {
		r.block, r.blockFrom, r.blockNext = damagedBlock(t, lastFull)
	}
	return r
}

// damagedBlock finds the block that reading t stopped at, the one after
// the block of lastFull (the last key read, with its version; nil: none
// read, the first block), from the first keys of t's blocks that its
// index holds. Returns its index, its first key and the next block's
// (nil for the last block), without versions; -1 when past the last.
func damagedBlock(t *table.Table, lastFull []byte) (int, []byte, []byte) {
	bases := t.KeySplits(math.MaxInt32, nil) // every block's first key: n ≥ the blocks
	i := 0
	if lastFull != nil {
		i = sort.Search(len(bases), func(j int) bool { return y.CompareKeys([]byte(bases[j]), lastFull) > 0 })
	}
	if i >= len(bases) {
		return -1, nil, nil
	}
	var next []byte
	if i+1 < len(bases) {
		next = slices.Clone(y.ParseKey([]byte(bases[i+1])))
	}
	return i, slices.Clone(y.ParseKey([]byte(bases[i]))), next
}

// scanTables reads every SST file in dir (readTable) before Badger opens
// it, by file name. Open runs it so that, when a table is damaged, it can
// open Badger without compactions: Badger compacts a level-0 table as soon
// as it opens, and a compaction reads a damaged table only up to its
// damaged block and drops the keys after it, for good and without an
// error. Errors are the directory's read errors; a table that does not
// read is in the map with its error.
func scanTables(dir string) (map[string]tableRead, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("badger: %w", err)
	}
	out := make(map[string]tableRead)
	comps := tableCompressions(dir)
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".sst" || !e.Type().IsRegular() {
			continue
		}
		out[e.Name()] = readTable(filepath.Join(dir, e.Name()), comps)
	}
	return out, nil
}

// checkManifest refuses, before Badger opens dir, a MANIFEST that no
// longer lists tables holding the only copy of their keys: one that is
// missing while the directory holds tables, or one whose last record is
// cut (damage, or a power loss in the middle of its append) while tables
// it does not list are in the directory. Opened to write, Badger would
// create a new MANIFEST or cut the record off and delete every table the
// MANIFEST does not list, without an error. Tables not listed beside a
// MANIFEST that reads to its end are left by a crash between writing a
// table and recording it (their keys are in the memtable log or in the
// tables they were compacted from), and Badger's to delete. Returns an
// error wrapping ErrDamaged that names the tables, or nil; a MANIFEST
// that does not read at all is left to Badger's own error.
//
// It also refuses a table the MANIFEST lists that does not open (pre, the
// reads of scanTables: a table cut short or with a damaged index), which
// Badger's open would meet in a goroutine of its own and panic on.
func checkManifest(dir string, bo bg.Options, pre map[string]tableRead) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("badger: %w", err)
	}
	var ssts []string
	ids := map[string]uint64{}
	for _, e := range ents {
		name := e.Name()
		if filepath.Ext(name) != ".sst" {
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSuffix(name, ".sst"), 10, 64)
		if err != nil {
			continue // not one of Badger's (NNNNNN.sst)
		}
		ssts = append(ssts, name)
		ids[name] = id
	}
	if len(ssts) == 0 {
		return nil
	}
	slices.Sort(ssts)
	refuse := func(what string, tables []string) error {
		return fmt.Errorf("%w: the MANIFEST of %s %s and does not list %d tables of the directory (%s): opening would delete them; "+
			"restore from a backup, or move those tables out of the directory to open it without them",
			ErrDamaged, dir, what, len(tables), strings.Join(tables, ", "))
	}
	f, err := os.Open(filepath.Join(dir, bg.ManifestFilename))
	if errors.Is(err, os.ErrNotExist) {
		return refuse("is missing", ssts)
	}
	if err != nil {
		return fmt.Errorf("badger: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("badger: %w", err)
	}
	m, end, err := bg.ReplayManifestFile(f, bo.ExternalMagicVersion, bo)
	if err != nil {
		return nil
	}
	for _, name := range ssts {
		if r, ok := pre[name]; ok && r.want == 0 && r.err != nil && !errors.Is(r.err, errEncrypted) {
			// an encrypted table (KeyID) does not open without its key:
			// Badger's own open says which key is wrong
			if tm, listed := m.Tables[ids[name]]; listed && tm.KeyID == 0 {
				why := strings.TrimPrefix(r.err.Error(), ErrDamaged.Error()+": ")
				return fmt.Errorf("%w: table %s does not open (%s): restore %s from a backup", ErrDamaged, name, why, dir)
			}
		}
	}
	if end == fi.Size() {
		return nil
	}
	var unlisted []string
	for _, name := range ssts {
		if _, ok := m.Tables[ids[name]]; !ok {
			unlisted = append(unlisted, name)
		}
	}
	if len(unlisted) == 0 {
		return nil
	}
	return refuse(fmt.Sprintf("ends in a cut record (byte %d of %d)", end, fi.Size()), unlisted)
}
