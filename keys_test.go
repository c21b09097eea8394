package memosrt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/textmem"
)

// The facade's keys: grants bound to their cubes as they are (an unknown
// cube refused), expiry by the OS's clock, a grant on a cube deleted and
// made again since allowing nothing (and taken), a cube delete taking its
// grants, revoke by id.
func TestKeys(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	o, err := Open(ctx, Options{Dir: t.TempDir(), NoSync: true, NoScheduler: true, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close(ctx)
	for _, c := range []string{"shop", "blog"} {
		if _, err := o.CreateCube(ctx, Cube{Name: c}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := o.CreateKey(ctx, KeySpec{Grants: []KeyGrant{{Cube: "shop", Right: KeyRead}, {Cube: "nosuch", Right: KeyRead}}}); !errors.Is(err, ErrUnknownCube) || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("a key of an unknown cube: %v", err)
	}
	k, tok, err := o.CreateKey(ctx, KeySpec{Name: "reader", Grants: []KeyGrant{{Cube: "shop", Right: KeyRead}, {Cube: "blog", Right: KeyWrite}},
		ExpiresIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	shop, _ := o.Cube(ctx, "shop")
	if g, _ := k.Grant("shop"); !g.CubeCreated.Equal(shop.Created) {
		t.Fatalf("grant %+v not bound to the cube made at %v", g, shop.Created)
	}
	got, err := o.Key(ctx, tok)
	if err != nil || got.ID != k.ID || !got.Expires.Equal(clock.Now().Add(time.Hour)) {
		t.Fatalf("Key: %+v %v", got, err)
	}
	for _, c := range []struct {
		cube string
		need KeyRight
		ok   bool
	}{{"shop", KeyRead, true}, {"shop", KeyWrite, false}, {"blog", KeyWrite, true}, {"other", KeyRead, false}} {
		if err := o.KeyAllows(ctx, got, c.cube, c.need); (err == nil) != c.ok || err != nil && !errors.Is(err, ErrKeyDenied) {
			t.Errorf("KeyAllows(%s, %s): %v", c.cube, c.need, err)
		}
	}
	clock.Advance(time.Hour)
	if _, err := o.Key(ctx, tok); !errors.Is(err, ErrKeyExpired) || !strings.Contains(err.Error(), k.ID) {
		t.Fatalf("an hour later: %v, want ErrKeyExpired naming the key", err)
	}

	// a grant made for the cube before it was deleted and made again
	// (another node's delete, unheard here) allows nothing, and goes
	k2, tok2, err := o.CreateKey(ctx, KeySpec{Grants: []KeyGrant{{Cube: "shop", Right: KeyWrite}, {Cube: "blog", Right: KeyRead}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.keys.SetGrant(ctx, k2.ID, KeyGrant{Cube: "shop", Right: KeyWrite, CubeCreated: shop.Created.Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	k2, _ = o.Key(ctx, tok2)
	err = o.KeyAllows(ctx, k2, "shop", KeyRead)
	want := `accesskey: access denied: key ` + k2.ID + ` has no read right on cube "shop" (its grant was for a cube deleted since)`
	if !errors.Is(err, ErrKeyDenied) || err.Error() != want {
		t.Fatalf("a stale grant: %v, want %q", err, want)
	}
	if k2, _ = o.Key(ctx, tok2); len(k2.Grants) != 1 || k2.Grants[0].Cube != "blog" {
		t.Fatalf("the stale grant stayed: %+v", k2.Grants)
	}

	// deleting blog takes the key's last grant: the key is gone
	if err := o.DeleteCube(ctx, "blog"); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Key(ctx, tok2); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("a key whose cubes are deleted: %v", err)
	}
	keys, err := o.Keys(ctx)
	if err != nil || len(keys) != 1 || keys[0].ID != k.ID {
		t.Fatalf("Keys: %+v %v", keys, err)
	}
	if err := o.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if err := o.RevokeKey(ctx, k.ID); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("revoked twice: %v", err)
	}
}

// A data directory with access keys of the old format (one cube each, in
// the directory's own records) opens with them moved into the text store:
// each still opens its cube, with the write right, and lists with its id.
func TestKeysOldFormat(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o, err := Open(ctx, Options{Dir: dir, NoSync: true, NoScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := o.CreateCube(ctx, Cube{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tok := "msk_" + strings.Repeat("5a", 32)
	h := sha256.Sum256([]byte(tok))
	hash := hex.EncodeToString(h[:])
	db, err := datadir.Open(datadir.Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(map[string]any{"id": hash[:12], "cube": "alice", "created": rec.Created, "cube_created": rec.Created})
	if err := db.Update(func(txn *bg.Txn) error { return txn.Set([]byte("srv/key/"+hash), js) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	o, err = Open(ctx, Options{Dir: dir, NoSync: true, NoScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close(ctx)
	k, err := o.Key(ctx, tok)
	if err != nil || k.ID != hash[:12] || o.KeyAllows(ctx, k, "alice", KeyWrite) != nil {
		t.Fatalf("the old key: %+v %v", k, err)
	}
	keys, err := o.Keys(ctx)
	if err != nil || len(keys) != 1 || keys[0].ID != hash[:12] {
		t.Fatalf("Keys: %+v %v", keys, err)
	}
	// it lives in the text store now
	var n int
	err = o.mem.Backend().View(ctx, textmem.KeySpace, func(txn textmem.Txn) error {
		return txn.Iterate([]byte("h/"), true, func(k, _ []byte) error { n++; return nil })
	})
	if err != nil || n != 1 {
		t.Fatalf("keys in the text store: %d %v", n, err)
	}
}
