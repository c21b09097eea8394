package textmem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
)

// flipInFiles flips bit 0 of the byte at offset off past the first
// occurrence of needle in the files of dir matching glob, and returns the
// file's name.
func flipInFiles(t *testing.T, dir, glob string, needle []byte, off int) string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, glob))
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		at := bytes.Index(data, needle)
		if at < 0 {
			continue
		}
		data[at+off] ^= 0x01
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return filepath.Base(name)
	}
	t.Fatalf("no %s file of %s holds %q", glob, dir, needle)
	return ""
}

// One bit flipped in a memory's text in the SST that holds it is never
// served as altered text. With Badger's block checksums verified (the
// default), Badger answers "not found" for every key of the damaged block
// (its reads skip a block that fails): a memory the cube's index still
// holds fails with ErrDamaged naming its key, one whose index record went
// with the block too is not found, and Open (which logs it) and
// VerifyTables (memosrt check) name the SST; with them off (badger
// Options.NoVerify), the record's own checksum catches it and only that
// memory is damaged: Get fails naming t/alice/m/<id>, List gives the other
// five of alice's memories, Search leaves it out, and Damaged counts it.
func TestDamagedMemoryNotServed(t *testing.T) {
	if pgServer != nil {
		t.Skip("Badger records only")
	}
	for _, verify := range []bool{true, false} {
		t.Run(fmt.Sprintf("badger_verify=%v", verify), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			db, err := datadir.Open(datadir.Options{Dir: dir, NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(db, Options{Now: clock()})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{} // id → text
			cubeOf := map[string]string{}
			var target string
			for i, w := range []string{"lighthouse", "orchard", "QUARRY", "harbour", "meadow", "glacier"} {
				m := mustAdd(t, s, "alice", Memory{Text: fmt.Sprintf("alice keeps the %s ledger number %d", w, i)})
				want[m.ID], cubeOf[m.ID] = m.Text, "alice"
				if w == "QUARRY" {
					target = m.ID
				}
			}
			for i, w := range []string{"violin", "kettle", "compass"} {
				m := mustAdd(t, s, "bob", Memory{Text: fmt.Sprintf("bob mends the %s every spring %d", w, i)})
				want[m.ID], cubeOf[m.ID] = m.Text, "bob"
			}
			// a cube whose keys sort after alice's and bob's, of more than
			// a block (datadir's 132 KiB): the damaged block is not the
			// table's last, which Badger reads to open it
			for i := range 1000 {
				mustAdd(t, s, "zed", Memory{Text: fmt.Sprintf("zed files note %d about the harbour ledger", i)})
			}
			s.Close()
			if err := db.Close(); err != nil { // flushes the memtable to an SST
				t.Fatal(err)
			}
			file := flipInFiles(t, dir, "*.sst", []byte("QUARRY"), 2) // the text's (index terms are lower-case): "QUARRY" → "QTARRY"

			db, err = datadir.Open(datadir.Options{Dir: dir, NoSync: true, NoVerify: !verify})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			s, err = Open(db, Options{Now: clock()})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			damaged, lost := 0, 0
			for id, text := range want {
				m, err := s.Get(ctx, cubeOf[id], id)
				switch {
				case errors.Is(err, ErrDamaged):
					damaged++
					if key := "t/" + cubeOf[id] + "/m/" + id; !strings.Contains(err.Error(), key) {
						t.Errorf("Get %s: %v, want the error to name %s", id, err, key)
					}
				case errors.Is(err, ErrNotFound) && verify:
					// its index record was in the damaged block too:
					// the load counted the cube's missing records
					lost++
				case err != nil:
					t.Errorf("Get %s: %v, want its text or ErrDamaged", id, err)
				case m.Text != text:
					t.Errorf("Get %s served %q, want %q or ErrDamaged", id, m.Text, text)
				case id == target:
					t.Errorf("Get %s served the damaged memory", id)
				}
			}
			t.Logf("%s: %d of %d memories damaged, %d lost with their index record", file, damaged, len(want), lost)
			if s.Damaged() != int64(damaged) {
				t.Errorf("Damaged() = %d after %d damaged Gets", s.Damaged(), damaged)
			}
			if verify {
				// what the running store cannot see, VerifyTables (memosrt
				// check) finds: the table's keys do not all read back
				td, err := db.VerifyTables()
				if err != nil {
					t.Fatal(err)
				}
				if damaged+lost == 0 || len(td) != 1 || td[0].File != file || td[0].Keys >= td[0].Want {
					t.Fatalf("VerifyTables = %+v after %d damaged, %d lost; want %s with keys missing", td, damaged, lost, file)
				}
				if od := db.TableDamage(); len(od) != 1 || od[0].File != file {
					t.Fatalf("Open found %+v, want %s (logged, reclaim skipped)", od, file)
				}
				return
			}
			if damaged != 1 {
				t.Fatalf("%d memories damaged, want 1 (the one with the flipped bit)", damaged)
			}
			list, err := s.List(ctx, "alice")
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 5 {
				t.Fatalf("List alice: %d memories, want the 5 undamaged", len(list))
			}
			for _, m := range list {
				if m.ID == target || m.Text != want[m.ID] {
					t.Errorf("List alice served %s %q", m.ID, m.Text)
				}
			}
			hits, err := s.Search(ctx, "alice", "quarry ledger", 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hits {
				if h.Memory.ID == target || h.Memory.Text != want[h.Memory.ID] {
					t.Errorf("Search served %s %q", h.Memory.ID, h.Memory.Text)
				}
			}
			if len(hits) != 5 { // every alice memory has "ledger"
				t.Errorf("Search: %d hits, want 5", len(hits))
			}
			if s.Damaged() != 3 { // Get, List, Search each met it once
				t.Errorf("Damaged() = %d, want 3", s.Damaged())
			}
		})
	}
}

// hookBackend is a Backend whose Update calls afterUpdate once it has
// committed, and whose DeletePrefix first asks beforeDelete, which may
// refuse it (the process stopping there: what was committed stays).
type hookBackend struct {
	Backend
	afterUpdate  func()
	beforeDelete func(prefix []byte) error
}

func (h *hookBackend) Update(ctx context.Context, cube string, fn func(Txn) error) error {
	err := h.Backend.Update(ctx, cube, fn)
	if err == nil && h.afterUpdate != nil {
		h.afterUpdate()
	}
	return err
}

func (h *hookBackend) DeletePrefix(ctx context.Context, cube string, prefix []byte) error {
	if h.beforeDelete != nil {
		if err := h.beforeDelete(prefix); err != nil {
			return err
		}
	}
	return h.Backend.DeletePrefix(ctx, cube, prefix)
}

var errStopped = errors.New("stopped here")

// A memory that a delete took is not found, never damaged: not by a Get
// that runs between the delete's commit and the index update that
// follows it (a chat's hot-set read while a memory or the cube is
// deleted), and not after a DeleteCube cut short (a crash part way; it
// leaves the cube's other records behind): every memory then reads back
// whole or is not found, nothing counts as damage, and a repeated
// DeleteCube finishes the job.
func TestDeletedNotDamaged(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		del  func(s *Store, ids []string) error
	}{
		{"delete", func(s *Store, ids []string) error { return s.Delete(ctx, "alice", ids[0]) }},
		{"delete_cube", func(s *Store, _ []string) error { return s.DeleteCube(ctx, "alice") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := datadir.Open(datadir.Options{Dir: dir, NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			hb := &hookBackend{Backend: backendFor(t, db, dir)}
			s, err := OpenBackend(hb, Options{Now: clock()})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var ids []string
			for i, w := range []string{"lighthouse", "orchard", "quarry"} {
				ids = append(ids, mustAdd(t, s, "alice", Memory{Text: fmt.Sprintf("alice keeps the %s ledger %d", w, i)}).ID)
			}
			// what another request reads right after each commit of the
			// delete, and before each DeletePrefix
			var seen []error
			read := func() {
				for _, id := range ids {
					if _, err := s.Get(ctx, "alice", id); err != nil {
						seen = append(seen, err)
					}
				}
			}
			hb.afterUpdate = read
			hb.beforeDelete = func([]byte) error { read(); return nil }
			if err := tc.del(s, ids); err != nil {
				t.Fatal(err)
			}
			for _, err := range seen {
				if !errors.Is(err, ErrNotFound) {
					t.Errorf("Get during the %s: %v, want ErrNotFound", tc.name, err)
				}
			}
			if len(seen) == 0 {
				t.Errorf("no Get during the %s found a memory gone", tc.name)
			}
			if s.Damaged() != 0 {
				t.Errorf("Damaged() = %d after a %s, want 0", s.Damaged(), tc.name)
			}
		})
	}
	t.Run("delete_cube_cut_short", func(t *testing.T) {
		dir := t.TempDir()
		db, err := datadir.Open(datadir.Options{Dir: dir, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		hb := &hookBackend{Backend: backendFor(t, db, dir)}
		s, err := OpenBackend(hb, Options{Now: clock()})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for i, w := range []string{"lighthouse", "orchard", "quarry", "harbour"} {
			m := mustAdd(t, s, "alice", Memory{Text: fmt.Sprintf("alice keeps the %s ledger %d", w, i)})
			want[m.ID] = m.Text
		}
		// stop at the DeletePrefix of the whole cube (its memories are
		// gone by then): what was committed before it stays, as after a
		// crash there
		hb.beforeDelete = func(prefix []byte) error {
			if len(prefix) == 0 {
				return errStopped
			}
			return nil
		}
		if err := s.DeleteCube(ctx, "alice"); !errors.Is(err, errStopped) {
			t.Fatalf("DeleteCube = %v, want it stopped", err)
		}
		s.Close()
		hb.beforeDelete = nil
		s, err = OpenBackend(hb, Options{Now: clock()}) // a restart
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		list, err := s.List(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, m := range list {
			listed[m.ID] = true
			if m.Text != want[m.ID] {
				t.Errorf("List after a DeleteCube cut short: %s %q, want %q", m.ID, m.Text, want[m.ID])
			}
		}
		for id, text := range want {
			m, err := s.Get(ctx, "alice", id)
			switch {
			case errors.Is(err, ErrNotFound) && !listed[id]:
			case err == nil && m.Text == text && listed[id]:
			default:
				t.Errorf("Get %s after a DeleteCube cut short: %q, %v (listed %v); want it whole and listed, or not found", id, m.Text, err, listed[id])
			}
		}
		hits, err := s.Search(ctx, "alice", "ledger", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != len(list) {
			t.Errorf("Search after a DeleteCube cut short: %d hits, %d memories listed", len(hits), len(list))
		}
		if s.Damaged() != 0 {
			t.Errorf("Damaged() = %d after a DeleteCube cut short, want 0", s.Damaged())
		}
		if c, err := s.Check(ctx, "alice"); err != nil || !c.OK() {
			t.Errorf("Check after a DeleteCube cut short: %+v, %v; want no damage", c, err)
		}
		if err := s.DeleteCube(ctx, "alice"); err != nil {
			t.Fatal(err)
		}
		if list, err := s.List(ctx, "alice"); err != nil || len(list) != 0 {
			t.Errorf("List after DeleteCube again: %d memories, %v", len(list), err)
		}
	})
}

// A memory record larger than Badger's value threshold (77 KiB under a 1
// MiB memtable: a small filesystem) lives in the value log, where its
// damage is caught all the same: one bit flipped in its text fails
// Badger's value checksum, or with those off (badger Options.NoVerify)
// the record's own CRC-32C, which covers key and value whichever file
// holds them; in the newest value-log file, Badger cuts the file at the
// damaged entry when it opens, and the record then names a value past
// the file's end. Each way Get answers ErrDamaged naming t/alice/m/<id>,
// never the altered text; the other memories (in the LSM tree) read back,
// List leaves the damaged one out, and Damaged counts both reads.
func TestDamagedLargeMemoryInValueLog(t *testing.T) {
	if pgServer != nil {
		t.Skip("Badger records only")
	}
	for _, tc := range []struct {
		name           string
		verify, newest bool
	}{
		{"badger_verify", true, false},
		{"record_crc", false, false},
		{"newest_vlog_cut", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			bo := datadir.Options{Dir: dir, NoSync: true, MemTableSize: 1 << 20, NoCompactOnOpen: true}
			db, err := datadir.Open(bo)
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{Now: clock(), MaxTextBytes: 256 << 10}
			s, err := Open(db, opts)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for i, w := range []string{"lighthouse", "orchard"} {
				m := mustAdd(t, s, "alice", Memory{Text: fmt.Sprintf("alice keeps the %s ledger %d", w, i)})
				want[m.ID] = m.Text
			}
			long := "LONGLEDGER " + strings.Repeat("alice copies the quarry ledger by hand ", 2600) // 101 KiB
			if int64(len(long)) <= db.ValueThreshold() {
				t.Fatalf("a %d-byte text is not over the value threshold %d", len(long), db.ValueThreshold())
			}
			target := mustAdd(t, s, "alice", Memory{Text: long}).ID
			for i, w := range []string{"harbour", "meadow"} {
				m := mustAdd(t, s, "alice", Memory{Text: fmt.Sprintf("alice keeps the %s ledger %d", w, i+2)})
				want[m.ID] = m.Text
			}
			s.Close()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if !tc.newest {
				// a reopen starts a new value-log file: the record's is no
				// longer the newest, which Open would cut
				if db, err = datadir.Open(bo); err != nil {
					t.Fatal(err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
			flipInFiles(t, dir, "*.vlog", []byte("LONGLEDGER"), 2) // "LONGLEDGER" → "LOOGLEDGER"

			bo.NoVerify = !tc.verify
			if db, err = datadir.Open(bo); err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if s, err = Open(db, opts); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			m, err := s.Get(ctx, "alice", target)
			if key := "t/alice/m/" + target; !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), key) {
				t.Fatalf("Get of the damaged memory: %d bytes, %v; want ErrDamaged naming %s", len(m.Text), err, key)
			}
			t.Logf("Get: %v", err)
			for id, text := range want {
				if m, err := s.Get(ctx, "alice", id); err != nil || m.Text != text {
					t.Errorf("Get %s: %q, %v; want %q", id, m.Text, err, text)
				}
			}
			list, err := s.List(ctx, "alice")
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != len(want) {
				t.Errorf("List: %d memories, want the %d undamaged", len(list), len(want))
			}
			for _, m := range list {
				if m.Text != want[m.ID] {
					t.Errorf("List served %s %.40q", m.ID, m.Text)
				}
			}
			if s.Damaged() != 2 { // Get and List each met it once
				t.Errorf("Damaged() = %d, want 2", s.Damaged())
			}
		})
	}
}

// Bytes flipped inside a KV pack's payload in the newest value-log file
// lose no memory of any cube: memories of two cubes written before and
// after the pack's chunk (a Badger value of 1 MiB and more under
// "k/b/<pack>/<n>", as package kvcache writes it; 2 KiB texts, which a
// value threshold of 1 KiB would put in the value log too), the
// directory reopened (Badger cuts that file at the damaged entry): every
// memory reads back by Get, List and Search, and nothing counts as
// damage.
func TestPackDamageLosesNoMemory(t *testing.T) {
	if pgServer != nil {
		t.Skip("Badger records only")
	}
	ctx := context.Background()
	dir := t.TempDir()
	bo := datadir.Options{Dir: dir, NoSync: true}
	db, err := datadir.Open(bo)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(db, Options{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{"alice": {}, "bob": {}} // cube → id → text
	words := strings.Fields("amber basil cedar delta ember fjord garnet hazel indigo juniper kestrel lilac maple nectar onyx pepper quartz russet sable thistle")
	add := func(round int) {
		for _, cube := range []string{"alice", "bob"} {
			for i := range 5 {
				w := words[(round*5+i)*2%len(words):]
				text := fmt.Sprintf("%s note %d.%d %s", cube, round, i, strings.Repeat(w[0]+" "+w[1]+" ledger ", 100)) // 2 KiB
				m := mustAdd(t, s, cube, Memory{Text: text})
				if _, dup := want[cube][m.ID]; dup {
					t.Fatalf("%s: %.40q merged into %s", cube, text, m.ID)
				}
				want[cube][m.ID] = text
			}
		}
	}
	add(0)
	chunk := make([]byte, datadir.MaxValueThreshold+4096)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	copy(chunk[4096:], "PACK-PAYLOAD-MARK")
	if err := db.Badger().Update(func(tx *bg.Txn) error { return tx.Set([]byte("k/b/pack1/0"), chunk) }); err != nil {
		t.Fatal(err)
	}
	add(1)
	s.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	flipInFiles(t, dir, "*.vlog", []byte("PACK-PAYLOAD-MARK"), 100)

	if db, err = datadir.Open(bo); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Badger().View(func(tx *bg.Txn) error {
		item, err := tx.Get([]byte("k/b/pack1/0"))
		if err != nil {
			return err
		}
		_, err = datadir.ValueCopy(item)
		return err
	})
	if !errors.Is(err, datadir.ErrDamaged) {
		t.Fatalf("the damaged chunk reads %v, want ErrDamaged", err)
	}
	if s, err = Open(db, Options{Now: clock()}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for cube, mem := range want {
		for id, text := range mem {
			if m, err := s.Get(ctx, cube, id); err != nil || m.Text != text {
				t.Errorf("Get %s %s: %.30q, %v; want %.30q", cube, id, m.Text, err, text)
			}
		}
		list, err := s.List(ctx, cube)
		if err != nil || len(list) != len(mem) {
			t.Errorf("List %s: %d memories, %v; want %d", cube, len(list), err, len(mem))
		}
		hits, err := s.Search(ctx, cube, "ledger", 20)
		if err != nil || len(hits) != len(mem) {
			t.Errorf("Search %s: %d hits, %v; want %d", cube, len(hits), err, len(mem))
		}
	}
	if s.Damaged() != 0 {
		t.Errorf("Damaged() = %d, want 0", s.Damaged())
	}
}
