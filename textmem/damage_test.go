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

	"github.com/memosrt/memosrt/badger"
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
			db, err := badger.Open(badger.Options{Dir: dir, NoSync: true})
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
			s.Close()
			if err := db.Close(); err != nil { // flushes the memtable to an SST
				t.Fatal(err)
			}
			file := flipInFiles(t, dir, "*.sst", []byte("QUARRY"), 2) // the text's (index terms are lower-case): "QUARRY" → "QTARRY"

			db, err = badger.Open(badger.Options{Dir: dir, NoSync: true, NoVerify: !verify})
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
