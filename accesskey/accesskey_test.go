package accesskey

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
)

func TestStore(t *testing.T) {
	db, err := datadir.Open(datadir.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := New(db)
	made := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := made.Add(time.Hour)
	a, tokA, err := s.Create("alice", made, now)
	if err != nil {
		t.Fatal(err)
	}
	_, tokA2, err := s.Create("alice", made, now)
	if err != nil {
		t.Fatal(err)
	}
	b, tokB, err := s.Create("bob", made, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(tokA) != len(TokenPrefix)+64 || tokA[:4] != TokenPrefix || tokA == tokA2 {
		t.Fatalf("tokens %q %q", tokA, tokA2)
	}
	if a.Cube != "alice" || !a.Created.Equal(now) || !a.CubeCreated.Equal(made) || len(a.ID) != 12 || b.ID == a.ID {
		t.Fatalf("keys %+v %+v", a, b)
	}
	if got, err := s.Lookup(tokA); err != nil || got != a {
		t.Fatalf("Lookup: %+v, %v; want %+v", got, err, a)
	}
	for _, bad := range []string{"", "msk_", tokA + "0", "x" + tokA[1:], tokA[len(TokenPrefix):]} {
		if _, err := s.Lookup(bad); !errors.Is(err, ErrUnknown) {
			t.Fatalf("Lookup(%q): %v, want ErrUnknown", bad, err)
		}
	}
	// only the token's hash is stored
	err = db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, _ := it.Item().ValueCopy(nil)
			for _, tok := range []string{tokA, tokA2, tokB} {
				if bytes.Contains(it.Item().Key(), []byte(tok[len(TokenPrefix):])) || bytes.Contains(v, []byte(tok[len(TokenPrefix):])) {
					t.Fatalf("record %q holds a token", it.Item().Key())
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cubes, err := s.Cubes()
	slices.Sort(cubes)
	if err != nil || !slices.Equal(cubes, []string{"alice", "bob"}) {
		t.Fatalf("Cubes: %q, %v", cubes, err)
	}
	if err := s.Revoke(tokA2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(tokA2); !errors.Is(err, ErrUnknown) {
		t.Fatalf("revoked key: %v", err)
	}
	if err := s.DeleteCube("alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(tokA); !errors.Is(err, ErrUnknown) {
		t.Fatalf("key of a deleted cube: %v", err)
	}
	if got, err := s.Lookup(tokB); err != nil || got != b {
		t.Fatalf("bob's key after alice's cube went: %+v, %v", got, err)
	}
	if cubes, err := s.Cubes(); err != nil || !slices.Equal(cubes, []string{"bob"}) {
		t.Fatalf("Cubes after delete: %q, %v", cubes, err)
	}
}
