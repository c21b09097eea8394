package datadir

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bg "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/y"
)

// newestVlogWith returns the path of the newest value-log file of dir
// holding needle and the offset of needle in it.
func newestVlogWith(t *testing.T, dir string, needle []byte) (string, int) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
	slices.Sort(names)
	for i := len(names) - 1; i >= 0; i-- {
		data, err := os.ReadFile(names[i])
		if err != nil {
			t.Fatal(err)
		}
		if at := bytes.Index(data, needle); at >= 0 {
			return names[i], at
		}
	}
	t.Fatalf("no value-log file of %s holds %q", dir, needle)
	return "", 0
}

// flip XORs n bytes of path at off with 0xff.
func flip(t *testing.T, path string, off, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, int64(off)); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] ^= 0xff
	}
	if _, err := f.WriteAt(b, int64(off)); err != nil {
		t.Fatal(err)
	}
}

// Eight bytes flipped inside a pack chunk (a value of MaxValueThreshold bytes
// or more) in the newest value-log file, with small records written
// before and after it: Badger truncates that file at the damaged entry on
// the next open, and the loss is the large values only. Every small
// record (what a memory is) reads back byte for byte; the damaged chunk
// and the one after it fail with ErrDamaged (where Badger itself
// returns an empty value and no error); ScanValueLog
// names the damaged chunk's key before the open.
func TestPackDamageInNewestVlog(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, NoSync: true, NoCompactOnOpen: true}
	d, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	small := map[string][]byte{}
	set := func(k string, v []byte) {
		t.Helper()
		if err := d.Badger().Update(func(tx *bg.Txn) error { return tx.Set([]byte(k), v) }); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		k := fmt.Sprintf("t/alice/m/%02d", i)
		small[k] = bytes.Repeat(fmt.Appendf(nil, "memory %d of alice. ", i), 50) // 1 KiB: in the value log under the old 1 KiB threshold
		set(k, small[k])
	}
	chunk := func(tag byte) []byte {
		b := make([]byte, MaxValueThreshold+4096)
		for i := range b {
			b[i] = byte(i*7) ^ tag
		}
		copy(b[4096:], fmt.Appendf(nil, "PACKPAYLOAD-%c", tag))
		return b
	}
	set("k/b/pack1/0", chunk('1'))
	for i := range 20 {
		k := fmt.Sprintf("t/bob/m/%02d", i)
		small[k] = bytes.Repeat(fmt.Appendf(nil, "memory %d of bob. ", i), 60)
		set(k, small[k])
	}
	set("k/b/pack2/0", chunk('2'))
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	path, at := newestVlogWith(t, dir, []byte("PACKPAYLOAD-1"))
	flip(t, path, at+100, 8)
	dmg, err := ScanValueLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(dmg) != 1 || !bytes.HasPrefix(dmg[0].Key, []byte("k/b/pack1/0")) || dmg[0].Rest || dmg[0].File != filepath.Base(path) {
		t.Fatalf("ScanValueLog = %+v, want one entry, key k/b/pack1/0, in %s", dmg, filepath.Base(path))
	}

	if d, err = Open(opts); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got := 0
	err = d.Badger().View(func(tx *bg.Txn) error {
		for k, want := range small {
			item, err := tx.Get([]byte(k))
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			v, err := ValueCopy(item)
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			if !bytes.Equal(v, want) {
				return fmt.Errorf("%s: %q, want %q", k, v, want)
			}
			got++
		}
		for _, k := range []string{"k/b/pack1/0", "k/b/pack2/0"} {
			item, err := tx.Get([]byte(k))
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			if _, err := ValueCopy(item); !errors.Is(err, ErrDamaged) {
				return fmt.Errorf("%s: read error %v, want ErrDamaged", k, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != 40 {
		t.Fatalf("%d small records read back, want 40", got)
	}
}

// 16 bytes damaged in a middle block of an SST: the directory still opens
// (read-only), its iterators skip the block without an error, and
// VerifyTables names the file, the key count and the damaged key range.
func TestVerifyTables(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, NoSync: true, NoCompactOnOpen: true}
	d, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	for b := range 4 { // about 6 blocks (blockSize); a transaction holds at most 614 KiB
		if err := d.Badger().Update(func(tx *bg.Txn) error {
			for i := b * 2500; i < (b+1)*2500; i++ {
				if err := tx.Set(fmt.Appendf(nil, "t/carol/m/%05d", i), fmt.Appendf(nil, "carol's memory number %d, unique %x", i, i*7919)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(); err != nil { // flushes the memtable to an SST
		t.Fatal(err)
	}
	if d, err = Open(Options{Dir: dir, ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	if td, err := d.VerifyTables(); err != nil || len(td) != 0 {
		t.Fatalf("VerifyTables on an intact directory: %+v, %v", td, err)
	}
	d.Close()
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(ssts) != 1 {
		t.Fatalf("%d SSTs, want 1", len(ssts))
	}
	fi, err := os.Stat(ssts[0])
	if err != nil {
		t.Fatal(err)
	}
	flip(t, ssts[0], int(fi.Size()/3), 16) // a middle block: the table still opens
	if d, err = Open(Options{Dir: dir, ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	td, err := d.VerifyTables()
	if err != nil {
		t.Fatal(err)
	}
	if len(td) != 1 || td[0].File != filepath.Base(ssts[0]) || td[0].Want != 10000 || td[0].Keys >= 10000 ||
		!bytes.HasPrefix(td[0].After, []byte("t/carol/m/")) || string(td[0].Through) != "t/carol/m/09999" {
		t.Fatalf("VerifyTables = %+v, want %s: 10000 keys, fewer read back, damage after a key of carol's through t/carol/m/09999", td, filepath.Base(ssts[0]))
	}
	// the damaged block starts right after the last key read back, and
	// the next block's first key (from the index) lies beyond it
	if td[0].Block <= 0 || bytes.Compare(td[0].BlockFrom, td[0].After) <= 0 || !bytes.HasPrefix(td[0].BlockFrom, []byte("t/carol/m/")) ||
		bytes.Compare(td[0].BlockNext, td[0].BlockFrom) <= 0 || bytes.Compare(td[0].BlockNext, td[0].Through) > 0 {
		t.Fatalf("damaged block %d: [%q, %q), after %q: want a block after the first, starting past the last key read", td[0].Block, td[0].BlockFrom, td[0].BlockNext, td[0].After)
	}
	t.Logf("%s: %d of %d keys read back, damage in (%s, %s], block %d [%s, %s)", td[0].File, td[0].Keys, td[0].Want, td[0].After, td[0].Through, td[0].Block, td[0].BlockFrom, td[0].BlockNext)
}

// A directory with 16 damaged bytes in an SST opens to write without
// losing the keys after the damaged block: Badger compacts a level-0
// table as soon as it opens, and Reclaim compacts every table, and either
// would read the table only up to its damaged block and drop the rest for
// good (after which VerifyTables finds nothing). Open sees the damage
// first and runs no compaction: after writes, a Reclaim that would
// compact and a Close, the damaged table is still there, byte for byte,
// and VerifyTables still names it.
func TestOpenDamagedTableKeepsKeys(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(Options{Dir: dir, NoSync: true, NoCompactOnOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	for b := range 4 { // about 6 blocks (blockSize); a transaction holds at most 614 KiB
		if err := d.Badger().Update(func(tx *bg.Txn) error {
			for i := b * 2500; i < (b+1)*2500; i++ {
				cube := []string{"alice", "bob", "carol"}[i%3]
				if err := tx.Set(fmt.Appendf(nil, "t/%s/m/%05d", cube, i), fmt.Appendf(nil, "memory number %d, unique %x", i, i*7919)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(); err != nil { // flushes the memtable to a level-0 SST
		t.Fatal(err)
	}
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(ssts) != 1 {
		t.Fatalf("%d SSTs, want 1", len(ssts))
	}
	fi, err := os.Stat(ssts[0])
	if err != nil {
		t.Fatal(err)
	}
	flip(t, ssts[0], int(fi.Size()/3), 16) // a block a third in: the table still opens
	damaged, err := os.ReadFile(ssts[0])
	if err != nil {
		t.Fatal(err)
	}
	d, err = Open(Options{Dir: dir, NoSync: true, ValueLogFileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close() // idempotent; should a check fail
	td := d.TableDamage()
	if len(td) != 1 || td[0].File != filepath.Base(ssts[0]) || td[0].Keys >= 10000 {
		t.Fatalf("TableDamage = %+v, want %s with fewer than 10000 keys", td, filepath.Base(ssts[0]))
	}
	// grow the value log by a file: Reclaim then flushes and compacts
	big := bytes.Repeat([]byte("v"), int(d.threshold))
	for i := range 12 {
		if err := d.Badger().Update(func(tx *bg.Txn) error { return tx.Set(fmt.Appendf(nil, "big/%d", i), big) }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(ssts[0]); err != nil || !bytes.Equal(b, damaged) {
		t.Fatalf("the damaged table after opening to write: %d bytes, %v; want it as it was (%d bytes)", len(b), err, len(damaged))
	}
	if d, err = Open(Options{Dir: dir, ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	again, err := d.VerifyTables()
	if err != nil || len(again) != 1 || again[0].File != td[0].File || again[0].Keys != td[0].Keys {
		t.Fatalf("VerifyTables = %+v, %v; want %s with %d keys read back, as before", again, err, td[0].File, td[0].Keys)
	}
}

// A MANIFEST cut short (its last record torn) or missing no longer lists
// tables that hold the directory's only copy of their keys, and Badger,
// opened to write, deletes every table its MANIFEST does not list: Open
// refuses such a directory with ErrDamaged naming the tables, writable or
// read-only (memosrt check), and deletes nothing; so it does a directory
// whose MANIFEST lists a table that does not open. A table left beside an
// intact MANIFEST (a crash between writing a table and recording it) is
// Badger's to delete, and the directory opens.
func TestOpenManifestDamage(t *testing.T) {
	setup := func(t *testing.T) (dir, sst string) {
		t.Helper()
		dir = t.TempDir()
		d, err := Open(Options{Dir: dir, NoSync: true, NoCompactOnOpen: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Badger().Update(func(tx *bg.Txn) error {
			for i := range 100 {
				if err := tx.Set(fmt.Appendf(nil, "t/alice/m/%04d", i), []byte("memory")); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil { // flushes the memtable to an SST
			t.Fatal(err)
		}
		ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
		if len(ssts) != 1 {
			t.Fatalf("%d SSTs, want 1", len(ssts))
		}
		return dir, ssts[0]
	}
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, manifest string)
		want   string
	}{
		{"cut", func(t *testing.T, m string) {
			fi, err := os.Stat(m)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(m, fi.Size()-10); err != nil {
				t.Fatal(err)
			}
		}, "ends in a cut record"},
		{"missing", func(t *testing.T, m string) {
			if err := os.Remove(m); err != nil {
				t.Fatal(err)
			}
		}, "is missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, sst := setup(t)
			c.damage(t, filepath.Join(dir, bg.ManifestFilename))
			for _, ro := range []bool{false, true} {
				d, err := Open(Options{Dir: dir, ReadOnly: ro})
				if err == nil {
					d.Close()
				}
				if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Base(sst)) {
					t.Fatalf("Open (read-only %v): %v; want ErrDamaged saying %q and naming %s", ro, err, c.want, filepath.Base(sst))
				}
			}
			if _, err := os.Stat(sst); err != nil {
				t.Fatalf("the table after the refused opens: %v", err)
			}
		})
	}
	// a listed table cut short: Badger's open panics on its index in a
	// goroutine of its own (no recover reaches it)
	t.Run("table cut", func(t *testing.T) {
		dir, sst := setup(t)
		fi, err := os.Stat(sst)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(sst, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		for _, ro := range []bool{false, true} {
			d, err := Open(Options{Dir: dir, ReadOnly: ro})
			if err == nil {
				d.Close()
			}
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "table "+filepath.Base(sst)+" does not open") {
				t.Fatalf("Open (read-only %v): %v; want ErrDamaged saying table %s does not open", ro, err, filepath.Base(sst))
			}
		}
	})
	t.Run("leftover table", func(t *testing.T) {
		dir, sst := setup(t)
		b, err := os.ReadFile(sst)
		if err != nil {
			t.Fatal(err)
		}
		left := filepath.Join(dir, "000099.sst")
		if err := os.WriteFile(left, b, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := Open(Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the leftover table after Open: %v, want it deleted", err)
		}
	})
}

// vlogEntry encodes one value-log entry as Badger writes it (meta, user
// meta, uvarint key length, value length, expiry, key, value, CRC-32C).
func vlogEntry(meta byte, key, value string) []byte {
	b := []byte{meta, 0}
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = binary.AppendUvarint(b, uint64(len(value)))
	b = binary.AppendUvarint(b, 0)
	b = append(append(b, key...), value...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, y.CastagnoliCrcTable))
}

// scanVlog names, for the first damage of the newest file, the intact
// entries an open to write cuts with it: those of its own transaction
// before it and every one after it, but not a complete transaction or an
// entry outside one before it; an older file's damage cuts nothing.
func TestScanVlogCut(t *testing.T) {
	data := make([]byte, vlogHeaderSize)
	var offs []int64
	for _, e := range []struct {
		meta       byte
		key, value string
	}{
		{0, "a", "plain"}, {bitTxn, "b", "in txn 1"}, {1 << 7, "!badger!txn", "1"},
		{bitTxn, "c", "in txn 2"}, {bitTxn, "d", "damaged"}, {1 << 7, "!badger!txn", "2"}, {0, "e", "after"},
	} {
		offs = append(offs, int64(len(data)))
		data = append(data, vlogEntry(e.meta, e.key+"\x00\x00\x00\x00\x00\x00\x00\x01", e.value)...)
	}
	data[offs[5]-6] ^= 0xff // a byte of d's value
	got := scanVlog("000003.vlog", data, true)
	if len(got) != 1 || got[0].Offset != offs[4] || string(got[0].Key[:1]) != "d" {
		t.Fatalf("damage %+v, want one at byte %d (key d)", got, offs[4])
	}
	var cut []int64
	for _, e := range got[0].Cut {
		cut = append(cut, e.Offset)
	}
	if want := []int64{offs[3], offs[5], offs[6]}; !slices.Equal(cut, want) {
		t.Fatalf("cut entries at %v, want %v (c, the end of its transaction, e)", cut, want)
	}
	if old := scanVlog("000002.vlog", data, false); len(old) != 1 || old[0].Cut != nil {
		t.Fatalf("damage in an older file: %+v, want one, cutting nothing", old)
	}
}
