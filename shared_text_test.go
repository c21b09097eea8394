package memosrt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/textmem"
	textpg "github.com/memosrt/memosrt/textmem/postgres"
)

// openShared opens an OS without a model over dir with its text tier in
// the PostgreSQL database at url.
func openShared(t *testing.T, dir, url string) (*OS, func()) {
	t.Helper()
	pg, err := textpg.Open(context.Background(), url, textpg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o, err := Open(context.Background(), Options{Dir: dir, NoSync: true, NoScheduler: true, TextStore: pg})
	if err != nil {
		pg.Close()
		t.Fatal(err)
	}
	closed := false
	stop := func() {
		if !closed {
			closed = true
			o.Close(context.Background())
			pg.Close()
		}
	}
	t.Cleanup(stop)
	return o, stop
}

// Two OSes sharing one PostgreSQL text store: a cube deleted on one while
// the other adds to it keeps records and memories together (the add is
// deleted with it, or it keeps the cube alive); an access key minted on B
// for a cube that A deleted and made again while B was closed does not
// open the new cube; a directory served with the store refuses to open
// without it, and opens its own tier with TextStoreLocal.
func TestSharedTextStoreCubes(t *testing.T) {
	ctx := context.Background()
	srv := testutil.StartPostgres(t)
	url := srv.CreateDB()
	a, _ := openShared(t, t.TempDir(), url)
	bdir := t.TempDir()
	b, stopB := openShared(t, bdir, url)

	for i := range 20 {
		cube := fmt.Sprintf("race%d", i)
		if _, err := a.CreateCube(ctx, Cube{Name: cube}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var delErr, addErr error
		wg.Add(2)
		go func() { defer wg.Done(); delErr = a.DeleteCube(ctx, cube) }()
		go func() {
			defer wg.Done()
			_, addErr = b.AddMemory(ctx, cube, textmem.Memory{Text: fmt.Sprintf("added during the delete %d", i)})
		}()
		wg.Wait()
		if delErr != nil && !errors.Is(delErr, ErrUnknownCube) {
			t.Fatal(delErr)
		}
		if addErr != nil && !errors.Is(addErr, textmem.ErrNoRecord) {
			t.Fatal(addErr)
		}
		_, getErr := a.cubes.Get(ctx, cube)
		mems, err := a.Memories(ctx, cube)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case errors.Is(getErr, ErrUnknownCube) && len(mems) != 0:
			t.Fatalf("%s: %d memories left in a cube without a record (add: %v)", cube, len(mems), addErr)
		case getErr == nil && (addErr != nil || len(mems) != 1):
			t.Fatalf("%s: the cube stands with %d memories (add: %v)", cube, len(mems), addErr)
		}
	}

	// B's add lands right after A's cube delete took the texts and the
	// record: it makes the cube anew, and the rest of A's delete leaves
	// it standing with its memory
	if _, err := a.CreateCube(ctx, Cube{Name: "late"}); err != nil {
		t.Fatal(err)
	}
	a.afterTextDelete = func(cube string) {
		if _, err := b.AddMemory(ctx, cube, textmem.Memory{Text: "added between the delete's steps"}); err != nil {
			t.Error(err)
		}
	}
	if err := a.DeleteCube(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	a.afterTextDelete = nil
	if _, err := a.cubes.Get(ctx, "late"); err != nil {
		t.Fatalf("the cube B's add made anew: %v", err)
	}
	if mems, err := a.Memories(ctx, "late"); err != nil || len(mems) != 1 {
		t.Fatalf("its memories: %d %v", len(mems), err)
	}

	// a key of B's for cube kc; kc deleted and made again while B is closed
	if _, err := b.CreateCube(ctx, Cube{Name: "kc"}); err != nil {
		t.Fatal(err)
	}
	_, tok, err := b.CreateKey(ctx, KeySpec{Grants: []KeyGrant{{Cube: "kc", Right: KeyWrite}}})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := b.Key(ctx, tok); err != nil || b.KeyAllows(ctx, k, "kc", KeyWrite) != nil {
		t.Fatalf("key: %+v %v", k, err)
	}
	stopB()
	if err := a.DeleteCube(ctx, "kc"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AddMemory(ctx, "kc", textmem.Memory{Text: "the new owner's secret"}); err != nil {
		t.Fatal(err)
	}
	// closed without its store, B's directory says where its memories are
	if _, err := Open(ctx, Options{Dir: bdir, NoSync: true, NoScheduler: true}); !errors.Is(err, ErrTextStoreElsewhere) {
		t.Fatalf("open without the store: %v, want ErrTextStoreElsewhere", err)
	}
	b, stopB = openShared(t, bdir, url)
	// A's delete took the key's only grant, in the store both share
	if _, err := b.Key(ctx, tok); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("the old key on the new cube kc: %v, want ErrUnknownKey", err)
	}
	stopB()
	local, err := Open(ctx, Options{Dir: bdir, NoSync: true, NoScheduler: true, TextStoreLocal: true})
	if err != nil {
		t.Fatal(err)
	}
	if cs, err := local.Cubes(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("the directory's own tier: %v %v", cs, err)
	}
	local.Close(ctx)
	if o, err := Open(ctx, Options{Dir: bdir, NoSync: true, NoScheduler: true}); err != nil {
		t.Fatalf("after TextStoreLocal the directory opens on its own: %v", err)
	} else {
		o.Close(ctx)
	}
}
