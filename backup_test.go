package memosrt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/textmem"
)

// TestBackupRestoreServes takes OS.Backup while one goroutine adds
// memories and another warms a cube's pack over and over, restores it and
// opens the copy with Open: every memory acknowledged before the backup is
// there with its exact text; every pack the copy lists decodes and, where
// the source still holds it, is byte-identical; a turn on cube a (its
// pack untouched meanwhile) restores that pack in the copy and generates
// the same text as in the source. After Close, Backup is ErrClosed.
func TestBackupRestoreServes(t *testing.T) {
	ctx := context.Background()
	srcOpts := testOptions(t, t.TempDir())
	src := openOS(t, srcOpts)
	addMemories(t, src, "a", "Lily has a dog named Max.", "Max likes to run in the park.")
	addMemories(t, src, "b", "Tom has a red kite.")
	warmA, err := src.Warm(ctx, "a", WarmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var mu sync.Mutex
	var acked []textmem.Memory // added to cube c, acknowledged
	var warms atomic.Int32
	warmed := make(chan struct{}) // closed after the second warm: the load is under way
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			m, err := src.AddMemory(ctx, "c", textmem.Memory{Text: fmt.Sprintf("Note %d: the kite flew %d metres high.", i, 10+i)})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			acked = append(acked, m)
			mu.Unlock()
		}
	})
	var once sync.Once
	wg.Go(func() {
		defer once.Do(func() { close(warmed) }) // also when it fails early
		for !stop.Load() {
			if _, err := src.Warm(ctx, "b", WarmOptions{}); err != nil {
				t.Error(err)
				return
			}
			if warms.Add(1) == 2 {
				once.Do(func() { close(warmed) })
			}
		}
	})
	<-warmed
	mu.Lock()
	before := append([]textmem.Memory(nil), acked...)
	mu.Unlock()
	var buf bytes.Buffer
	info, err := src.Backup(ctx, &buf, "test")
	stop.Store(true)
	wg.Wait()
	if err != nil || t.Failed() {
		t.Fatal(err)
	}
	dst := restoredOS(t, buf.Bytes())

	got := map[string]string{}
	for _, cube := range []string{"a", "b", "c"} {
		ms, err := dst.Memories(ctx, cube)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			got[m.ID] = m.Text
		}
	}
	for _, m := range before {
		if got[m.ID] != m.Text {
			t.Errorf("memory %s: restored %q, acknowledged %q before the backup", m.ID, got[m.ID], m.Text)
		}
	}
	packs, err := dst.AllPacks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	same := 0
	for _, p := range packs {
		blob, err := dst.KVCache().Blob(p.ID)
		if err != nil {
			t.Errorf("restored pack %.12s of %s: %v", p.ID, p.Label, err)
			continue
		}
		if sb, err := src.KVCache().Blob(p.ID); err == nil {
			if !bytes.Equal(blob, sb) {
				t.Errorf("restored pack %.12s of %s: %d bytes differ from the source's %d", p.ID, p.Label, len(blob), len(sb))
			}
			same++
		}
	}
	t.Logf("backup: %d records, %d bytes; %d memories of cube c acknowledged before it; %d warms of b; %d packs restored, %d still in the source and byte-identical",
		info.Records, info.Bytes, len(before), warms.Load(), len(packs), same)

	req := Request{Cube: "a", Messages: []Message{{Role: "user", Content: "What is the name of Lily's dog?"}},
		NumPredict: 16, NoPersist: true, Record: RecordNone}
	want, err := src.Chat(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	res, err := dst.Chat(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.PackID != warmA.Packs[0].ID || want.PackID != res.PackID || res.Text != want.Text || res.Refused != "" {
		t.Fatalf("restored turn: pack %.12s %q %q, source: pack %.12s %q (warmed %.12s)",
			res.PackID, res.Refused, res.Text, want.PackID, want.Text, warmA.Packs[0].ID)
	}

	closed := openOS(t, testOptions(t, t.TempDir()))
	closed.Close(ctx)
	if _, err := closed.Backup(ctx, &buf, "test"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Backup after Close: %v", err)
	}
}

// TestBackupDuringCubeDelete calls Backup in the middle of DeleteCube (its
// failpoint between the text delete and the rest: packs, tier state,
// record): the backup waits for the delete, so the restored copy has no
// trace of the deleted cube (no record, no text-tier record, no packs)
// and the other cube whole, never the record of a cube without its
// memories.
func TestBackupDuringCubeDelete(t *testing.T) {
	ctx := context.Background()
	src := openOS(t, testOptions(t, t.TempDir()))
	addMemories(t, src, "a", "Lily has a dog named Max.", "Max likes to run in the park.")
	keep := addMemories(t, src, "b", "Tom has a red kite.")
	if _, err := src.Warm(ctx, "a", WarmOptions{}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	done := make(chan error, 1)
	src.afterTextDelete = func(cube string) {
		called := make(chan struct{})
		go func() {
			close(called)
			_, err := src.Backup(ctx, &buf, "test")
			done <- err
		}()
		<-called
	}
	if err := src.DeleteCube(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	dst := restoredOS(t, buf.Bytes())
	cubes, err := dst.Cubes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cubes) != 1 || cubes[0].Name != "b" {
		t.Fatalf("restored cubes %+v, want b alone", cubes)
	}
	var left []string // records of cube a (text tier, record)
	err = dst.DB().Badger().View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if k := string(it.Item().Key()); strings.HasPrefix(k, "t/a/") || k == "srv/cube/a" {
				left = append(left, k)
			}
		}
		return nil
	})
	if err != nil || len(left) != 0 {
		t.Fatalf("restored copy holds %d records of deleted cube a (%v): %.3q", len(left), err, left)
	}
	ms, err := dst.Memories(ctx, "b")
	if err != nil || len(ms) != 1 || ms[0].ID != keep[0].ID || ms[0].Text != keep[0].Text {
		t.Fatalf("restored cube b: %+v, %v", ms, err)
	}
	packs, err := dst.AllPacks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range packs {
		if p.Label == "a" || p.Label == "conv:a" {
			t.Errorf("restored pack %.12s of deleted cube a", p.ID)
		}
	}
}

// restoredOS restores backup (a Backup file's bytes) into a new data
// directory and opens an OS on it.
func restoredOS(t *testing.T, backup []byte) *OS {
	t.Helper()
	file := filepath.Join(t.TempDir(), "os.backup")
	if err := os.WriteFile(file, backup, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := datadir.RestoreBackup(context.Background(), file, datadir.Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	return openOS(t, testOptions(t, dir))
}
