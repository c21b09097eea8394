package accesskey

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/textmem"
	"github.com/memosrt/memosrt/textmem/postgres"
)

// openDB opens a data directory for a test and closes it at its end.
func openDB(t *testing.T) *datadir.DB {
	t.Helper()
	db, err := datadir.Open(datadir.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

// backends are the text stores keys live in: the data directory's Badger
// and PostgreSQL (skipped without it).
func backends(t *testing.T) map[string]func(t *testing.T) textmem.Backend {
	return map[string]func(t *testing.T) textmem.Backend{
		"badger": func(t *testing.T) textmem.Backend { return textmem.NewBadgerBackend(openDB(t)) },
		"postgres": func(t *testing.T) textmem.Backend {
			srv := testutil.StartPostgres(t)
			pg, err := postgres.Open(context.Background(), srv.CreateDB(), postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pg.Close() })
			return pg
		},
	}
}

// The store's whole life over each backend: keys of several cubes with
// read and write grants, looked up by token only (the hash is stored, never
// the token), listed oldest first, shared and unshared, dropped with a
// cube (but for grants on a cube made again), revoked by id.
func TestStore(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			be := open(t)
			s := New(be)
			made := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			now := made.Add(time.Hour)
			a, tokA, err := s.Create(ctx, Spec{Name: "shop reader", Grants: []Grant{{Cube: "shop", Right: Read, CubeCreated: made}},
				Expires: now.Add(24 * time.Hour), CreatedBy: "admin"}, now)
			if err != nil {
				t.Fatal(err)
			}
			b, tokB, err := s.Create(ctx, Spec{Grants: []Grant{{Cube: "shop", Right: Write, CubeCreated: made},
				{Cube: "blog", Right: Read, CubeCreated: made}}, ExpiresIn: time.Hour}, now.Add(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if len(tokA) != len(TokenPrefix)+64 || !strings.HasPrefix(tokA, TokenPrefix) || tokA == tokB {
				t.Fatalf("tokens %q %q", tokA, tokB)
			}
			wantA := Key{ID: a.ID, Name: "shop reader", Grants: []Grant{{Cube: "shop", Right: Read, CubeCreated: made}},
				Created: now, Expires: now.Add(24 * time.Hour), CreatedBy: "admin"}
			if !strings.HasPrefix(a.ID, IDPrefix) || len(a.ID) != len(IDPrefix)+12 || a.ID == b.ID || !equal(a, wantA) {
				t.Fatalf("key a %+v, want %+v", a, wantA)
			}
			if !b.Expires.Equal(now.Add(time.Second + time.Hour)) {
				t.Fatalf("key b expires %v, want an hour after it was made", b.Expires)
			}
			if got, err := s.Lookup(ctx, tokA); err != nil || !equal(got, a) {
				t.Fatalf("Lookup: %+v, %v; want %+v", got, err, a)
			}
			for _, bad := range []string{"", "msk_", tokA + "0", "x" + tokA[1:], tokA[len(TokenPrefix):]} {
				if _, err := s.Lookup(ctx, bad); !errors.Is(err, ErrUnknown) {
					t.Fatalf("Lookup(%q): %v, want ErrUnknown", bad, err)
				}
			}
			// rights: write covers read; messages name key, cube and right
			for _, c := range []struct {
				k    Key
				cube string
				need Right
				want string
			}{
				{a, "shop", Read, ""},
				{a, "shop", Write, `accesskey: access denied: key ` + a.ID + ` has no write right on cube "shop" (only read)`},
				{a, "blog", Read, `accesskey: access denied: key ` + a.ID + ` has no read right on cube "blog" (no right there)`},
				{b, "shop", Write, ""},
				{b, "shop", Read, ""},
				{b, "blog", Write, `accesskey: access denied: key ` + b.ID + ` has no write right on cube "blog" (only read)`},
			} {
				err := c.k.Allows(c.cube, c.need)
				if got := errString(err); got != c.want || (err != nil && !errors.Is(err, ErrDenied)) {
					t.Errorf("%s Allows(%s, %s): %q, want %q", c.k.ID, c.cube, c.need, got, c.want)
				}
			}
			if !a.Expired(now.Add(24*time.Hour)) || a.Expired(now.Add(24*time.Hour-time.Nanosecond)) {
				t.Fatal("expiry is not at Expires")
			}
			list, err := s.List(ctx)
			if err != nil || len(list) != 2 || !equal(list[0], a) || !equal(list[1], b) {
				t.Fatalf("List: %+v %v", list, err)
			}
			if cubes, err := s.Cubes(ctx); err != nil || !slices.Equal(cubes, []string{"blog", "shop"}) {
				t.Fatalf("Cubes: %q %v", cubes, err)
			}

			// sharing: a gets write on blog, then read on shop again
			if k, err := s.SetGrant(ctx, a.ID, Grant{Cube: "blog", Right: Write, CubeCreated: made}); err != nil ||
				!equal(Key{Grants: k.Grants}, Key{Grants: []Grant{{"shop", Read, made}, {"blog", Write, made}}}) {
				t.Fatalf("SetGrant: %+v %v", k, err)
			}
			if k, err := s.SetGrant(ctx, a.ID, Grant{Cube: "blog", Right: Read, CubeCreated: made}); err != nil ||
				!equal(Key{Grants: k.Grants}, Key{Grants: []Grant{{"shop", Read, made}, {"blog", Read, made}}}) {
				t.Fatalf("SetGrant down to read: %+v %v", k, err)
			}
			if got, _ := s.Lookup(ctx, tokA); got.Allows("blog", Read) != nil {
				t.Fatalf("the shared cube: %+v", got)
			}
			if _, err := s.SetGrant(ctx, a.ID, Grant{Cube: "blog", Right: "admin"}); !errors.Is(err, ErrBadSpec) {
				t.Fatalf("SetGrant of a bad right: %v", err)
			}
			if _, err := s.SetGrant(ctx, "key_000000000000", Grant{Cube: "blog", Right: Read}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("SetGrant of no key: %v", err)
			}
			if k, err := s.RemoveGrant(ctx, a.ID, "blog"); err != nil || len(k.Grants) != 1 {
				t.Fatalf("RemoveGrant: %+v %v", k, err)
			}
			if _, err := s.RemoveGrant(ctx, a.ID, "shop"); !errors.Is(err, ErrLastGrant) {
				t.Fatalf("RemoveGrant of the last cube: %v", err)
			}
			if _, err := s.RemoveGrant(ctx, a.ID, "blog"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("RemoveGrant of a cube it has not: %v", err)
			}

			// cube shop deleted and made again: grants on the new one stay
			remade := made.Add(2 * time.Hour)
			c, tokC, err := s.Create(ctx, Spec{Grants: []Grant{{Cube: "shop", Right: Write, CubeCreated: remade}}}, now)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := s.DropCube(ctx, "shop", remade); err != nil || n != 2 {
				t.Fatalf("DropCube: %d %v", n, err)
			}
			if _, err := s.Lookup(ctx, tokA); !errors.Is(err, ErrUnknown) {
				t.Fatalf("a key left without cubes: %v", err)
			}
			if _, err := s.Get(ctx, a.ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get of a dropped key: %v", err)
			}
			if got, err := s.Lookup(ctx, tokB); err != nil || got.Cubes()[0] != "blog" || len(got.Grants) != 1 {
				t.Fatalf("key b after shop went: %+v %v", got, err)
			}
			if got, err := s.Lookup(ctx, tokC); err != nil || !equal(got, c) {
				t.Fatalf("the new shop's key: %+v %v", got, err)
			}

			// revoke by id
			if err := s.Revoke(ctx, c.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Lookup(ctx, tokC); !errors.Is(err, ErrUnknown) {
				t.Fatalf("revoked key: %v", err)
			}
			if err := s.Revoke(ctx, c.ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("revoked twice: %v", err)
			}
			if list, err := s.List(ctx); err != nil || len(list) != 1 || list[0].ID != b.ID {
				t.Fatalf("List at the end: %+v %v", list, err)
			}
			// the key space is no cube
			if cubes, err := be.Cubes(ctx, nil); err != nil || len(cubes) != 0 {
				t.Fatalf("backend cubes: %q %v", cubes, err)
			}
		})
	}
}

// A spec with every problem at once is refused naming each.
func TestCreateRefuses(t *testing.T) {
	s := New(textmem.NewBadgerBackend(openDB(t)))
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		spec Spec
		want []string
	}{
		{Spec{}, []string{"0 cubes: a key names 1..256"}},
		{Spec{Grants: []Grant{{Cube: "a/b", Right: Read}, {Cube: "x", Right: "admin"}, {Cube: "x", Right: Read}}, Expires: now,
			Name: strings.Repeat("n", MaxName+1)},
			[]string{`cubes[0]: "a/b" is not a cube name`, `cubes[1]: right "admin"`, `cubes[2]: cube "x" named twice`,
				"expires 2026-01-02T03:04:05Z: not after now", "name: 201 bytes"}},
		{Spec{Grants: []Grant{{Cube: "x", Right: Read}}, ExpiresIn: time.Hour, Expires: now.Add(time.Hour)}, []string{"no expiry time with it"}},
	} {
		_, _, err := s.Create(context.Background(), c.spec, now)
		if !errors.Is(err, ErrBadSpec) {
			t.Fatalf("%+v: %v, want ErrBadSpec", c.spec, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %q lacks %q", c.spec, err, w)
			}
		}
	}
	if list, err := s.List(context.Background()); err != nil || len(list) != 0 {
		t.Fatalf("refused specs stored keys: %+v %v", list, err)
	}
}

// Keys the data directory kept itself (one cube per key, under srv/key/)
// move into the text store with their ids, as write grants; the old
// records go, and a second Migrate moves nothing.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	made := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tokOld := TokenPrefix + strings.Repeat("ab", 32)
	tokOlder := TokenPrefix + strings.Repeat("cd", 32)
	old := map[string]any{"id": hashToken(tokOld)[:12], "cube": "alice", "created": made, "cube_created": made.Add(-time.Hour)}
	older := map[string]any{"id": hashToken(tokOlder)[:12], "cube": "bob", "created": made} // before cube_created existed
	err := db.Update(func(txn *bg.Txn) error {
		for tok, rec := range map[string]any{tokOld: old, tokOlder: older} {
			js, _ := json.Marshal(rec)
			if err := txn.Set([]byte(legacyPrefix+hashToken(tok)), js); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s := New(textmem.NewBadgerBackend(db))
	if n, err := s.Migrate(ctx, db); err != nil || n != 2 {
		t.Fatalf("Migrate: %d %v", n, err)
	}
	k, err := s.Lookup(ctx, tokOld)
	want := Key{ID: hashToken(tokOld)[:12], Grants: []Grant{{Cube: "alice", Right: Write, CubeCreated: made.Add(-time.Hour)}}, Created: made}
	if err != nil || !equal(k, want) {
		t.Fatalf("the old key: %+v %v, want %+v", k, err, want)
	}
	if k, err := s.Lookup(ctx, tokOlder); err != nil || !equal(Key{Grants: k.Grants}, Key{Grants: []Grant{{Cube: "bob", Right: Write}}}) {
		t.Fatalf("the older key: %+v %v", k, err)
	}
	// revocable by its old id, and the old records are gone
	if err := s.Revoke(ctx, hashToken(tokOlder)[:12]); err != nil {
		t.Fatal(err)
	}
	err = db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(legacyPrefix)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			t.Errorf("old record %q left", it.Item().Key())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Migrate(ctx, db); err != nil || n != 0 {
		t.Fatalf("Migrate again: %d %v", n, err)
	}
	// no record of the data directory holds a token
	err = db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, _ := it.Item().ValueCopy(nil)
			for _, tok := range []string{tokOld, tokOlder} {
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
}

// equal compares keys field by field (times by Equal).
func equal(a, b Key) bool {
	if a.ID != b.ID || a.Name != b.Name || !a.Created.Equal(b.Created) || !a.Expires.Equal(b.Expires) || a.CreatedBy != b.CreatedBy ||
		len(a.Grants) != len(b.Grants) {
		return false
	}
	for i := range a.Grants {
		x, y := a.Grants[i], b.Grants[i]
		if x.Cube != y.Cube || x.Right != y.Right || !x.CubeCreated.Equal(y.CubeCreated) {
			return false
		}
	}
	return true
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The grant notation of `memosrt keys create --cube`: ParseGrant reads
// what FormatGrants writes, byte for byte.
func TestParseGrant(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    Grant
		wantErr error
	}{
		{"shop", Grant{Cube: "shop", Right: Read}, nil},
		{"shop:read", Grant{Cube: "shop", Right: Read}, nil},
		{"blog:write", Grant{Cube: "blog", Right: Write}, nil},
		{"shop:admin", Grant{}, ErrBadSpec},
		{"shop:", Grant{}, ErrBadSpec},
		{"..:read", Grant{}, textmem.ErrBadCube},
		{"", Grant{}, textmem.ErrBadCube},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseGrant(c.in)
			if !errors.Is(err, c.wantErr) || err == nil && got != c.want {
				t.Fatalf("ParseGrant(%q) = %+v, %v; want %+v, %v", c.in, got, err, c.want, c.wantErr)
			}
		})
	}
	gs := []Grant{{Cube: "shop", Right: Read}, {Cube: "blog", Right: Write}}
	text := FormatGrants(gs)
	if text != "shop:read, blog:write" {
		t.Fatalf("FormatGrants = %q", text)
	}
	for i, s := range strings.Split(text, ", ") {
		if g, err := ParseGrant(s); err != nil || g != gs[i] {
			t.Fatalf("ParseGrant(%q) = %+v, %v; want %+v", s, g, err, gs[i])
		}
	}
}
