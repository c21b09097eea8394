package datadir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/internal/testfs"
	"github.com/memosrt/memosrt/internal/testutil"
)

// openTest opens a database in dir and checks its Close at the end.
func openTest(t *testing.T, o Options) *DB {
	t.Helper()
	db, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// contents reads every live key of db.
func contents(t *testing.T, db *DB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := db.Badger().View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out[string(it.Item().KeyCopy(nil))] = v
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// value is the value writer w gives its key i: small ones stay in the LSM
// tree, every third goes to the value log (over the 1 KiB threshold).
func value(w, i int) []byte {
	v := fmt.Sprintf("writer %d value %d;", w, i)
	if i%3 == 0 {
		v = strings.Repeat(v, 4096/len(v)+1)
	}
	return []byte(v)
}

func backupFile(t *testing.T, db *DB) (string, BackupInfo) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b.memosrt-backup")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := db.Backup(context.Background(), f, BackupOptions{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, info
}

// TestBackupUnderLoad takes a backup while four writers add, overwrite and
// delete keys, restores it into a new directory and checks: every write
// acknowledged before Backup was called is there with its exact bytes (a
// delete: the key is absent); every other key present holds a value that
// was written to it; the restored database holds exactly the records the
// file says. A second backup after the writers stop restores to a
// byte-identical copy of the whole database.
func TestBackupUnderLoad(t *testing.T) {
	src := openTest(t, Options{Dir: t.TempDir(), NoSync: true})
	ctx := context.Background()
	var started atomic.Bool // set just before Backup is called
	type write struct {
		key   string
		value []byte // nil: deleted
	}
	const writers = 4
	acked := make([][]write, writers) // acknowledged before the backup began, in order
	all := make([]map[string][][]byte, writers)
	hist := make([][]write, writers) // every acknowledged write, in order
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var firstRound sync.WaitGroup
	firstRound.Add(writers)
	for w := range writers {
		all[w] = map[string][][]byte{}
		wg.Go(func() {
			for i := 0; ; i++ {
				if i == 200 {
					firstRound.Done()
				}
				select {
				case <-stop:
					if i < 200 {
						t.Errorf("writer %d stopped after %d writes", w, i)
					}
					return
				default:
				}
				k := fmt.Sprintf("w%d/k%05d", w, i)
				var wr write
				err := src.Badger().Update(func(txn *bg.Txn) error {
					switch {
					case i%10 == 9: // delete an earlier key
						wr = write{key: fmt.Sprintf("w%d/k%05d", w, i-5)}
						return txn.Delete([]byte(wr.key))
					case i%10 == 7: // overwrite an earlier key
						wr = write{key: fmt.Sprintf("w%d/k%05d", w, i-4), value: value(w, i)}
					default:
						wr = write{key: k, value: value(w, i)}
					}
					return txn.Set([]byte(wr.key), wr.value)
				})
				if err != nil {
					t.Error(err)
					return
				}
				all[w][wr.key] = append(all[w][wr.key], wr.value)
				hist[w] = append(hist[w], wr)
				if !started.Load() {
					acked[w] = append(acked[w], wr)
				}
			}
		})
	}
	firstRound.Wait()
	started.Store(true)
	path, info := backupFile(t, src)
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	dst := filepath.Join(t.TempDir(), "restored")
	rinfo, err := RestoreBackup(ctx, path, Options{Dir: dst, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if rinfo.Records != info.Records || rinfo.Bytes != info.Bytes || rinfo.Version != "test" || !rinfo.Created.Equal(info.Created) {
		t.Fatalf("restore read %+v, backup wrote %+v", rinfo, info)
	}
	got := contents(t, openTest(t, Options{Dir: dst, NoSync: true}))
	if int64(len(got)) != info.Records {
		t.Fatalf("restored %d keys, backup holds %d", len(got), info.Records)
	}
	nAcked := 0
	for w := range writers {
		n := map[string]int{} // acknowledged writes of each key before the backup
		for _, wr := range acked[w] {
			n[wr.key]++
		}
		nAcked += len(acked[w])
		for k, c := range n {
			// the last acknowledged write or a later one; keys are
			// overwritten 4 writes after being set and deleted 5 after,
			// never both, so a deleted key stays deleted
			allowed := all[w][k][c-1:]
			g, ok := got[k]
			switch {
			case allowed[0] == nil && ok:
				t.Errorf("%s: deleted before the backup, restored as %.40q", k, g)
			case !ok && !slices.ContainsFunc(allowed, func(v []byte) bool { return v == nil }):
				t.Errorf("%s: acknowledged before the backup, missing", k)
			case ok && !written(allowed, g):
				t.Errorf("%s: restored %.40q, last acknowledged %.40q", k, g, allowed[0])
			}
		}
	}
	for k, g := range got {
		var w int
		fmt.Sscanf(k, "w%d/", &w)
		if !written(all[w][k], g) {
			t.Errorf("%s: restored %.40q, never written", k, g)
		}
	}
	// one snapshot: each writer's keys in the copy are exactly the state
	// after some prefix of its writes, at least as long as those
	// acknowledged before the backup (snapshots taken at different times
	// for different key ranges would mix two prefixes)
	for w := range writers {
		mine := map[string][]byte{}
		for k, v := range got {
			if strings.HasPrefix(k, fmt.Sprintf("w%d/", w)) {
				mine[k] = v
			}
		}
		state, found := map[string][]byte{}, false
		for i, wr := range hist[w] {
			if wr.value == nil {
				delete(state, wr.key)
			} else {
				state[wr.key] = wr.value
			}
			if i+1 >= len(acked[w]) && maps.EqualFunc(state, mine, bytes.Equal) {
				found = true
				t.Logf("writer %d: the copy is its first %d writes (%d acknowledged before the backup, %d in all)", w, i+1, len(acked[w]), len(hist[w]))
				break
			}
		}
		if !found {
			t.Errorf("writer %d: its %d keys in the copy are no prefix of its %d writes", w, len(mine), len(hist[w]))
		}
	}
	t.Logf("%d writes acknowledged before the backup, %d keys in it (%d bytes)", nAcked, info.Records, info.Bytes)
	if nAcked < writers*200 {
		t.Fatalf("only %d writes before the backup", nAcked)
	}

	// quiescent: a byte-identical copy of the whole database
	path2, _ := backupFile(t, src)
	dst2 := filepath.Join(t.TempDir(), "restored")
	if _, err := RestoreBackup(ctx, path2, Options{Dir: dst2, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	want, got2 := contents(t, src), contents(t, openTest(t, Options{Dir: dst2, NoSync: true}))
	if len(want) != len(got2) {
		t.Fatalf("restored %d keys, source has %d", len(got2), len(want))
	}
	for k, v := range want {
		if !bytes.Equal(got2[k], v) {
			t.Fatalf("%s: restored %.40q, source %.40q", k, got2[k], v)
		}
	}
}

// written says v is one of the values written to a key (later writes may
// or may not be in a backup taken while they ran).
func written(vs [][]byte, v []byte) bool {
	for _, x := range vs {
		if x != nil && bytes.Equal(x, v) {
			return true
		}
	}
	return false
}

// fill writes n keys, every third one to the value log, in batches under
// Badger's transaction limit (15% of the memtable).
func fill(t *testing.T, db *DB, n int) {
	t.Helper()
	wb := db.Badger().NewWriteBatch()
	for i := range n {
		if err := wb.Set(fmt.Appendf(nil, "k%04d", i), value(0, i)); err != nil {
			wb.Cancel()
			t.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreRefusesDamage flips one byte at many offsets of a backup
// file (every byte of its first and last 64, a spread of the rest) and
// cuts it at as many lengths: each is refused with ErrBackupDamaged (a
// changed format number: ErrBackupFormat) and the target is left absent,
// or, when it was an empty directory, empty. The whole file restores.
func TestRestoreRefusesDamage(t *testing.T) {
	src := openTest(t, Options{Dir: t.TempDir(), NoSync: true})
	fill(t, src, 1500) // two frames
	path, info := backupFile(t, src)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int
	for i := range len(good) {
		if i < 64 || i >= len(good)-64 || i%(len(good)/200) == 0 {
			offs = append(offs, i)
		}
	}
	ctx := context.Background()
	try := func(t *testing.T, what string, b []byte, emptyDir bool) {
		t.Helper()
		p := filepath.Join(t.TempDir(), "bad")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		parent := t.TempDir()
		dst := filepath.Join(parent, "dst")
		if emptyDir {
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		_, err := RestoreBackup(ctx, p, Options{Dir: dst, NoSync: true})
		format := strings.HasPrefix(what, "flipped byte 8 of") || strings.HasPrefix(what, "flipped byte 9 of")
		if !errors.Is(err, ErrBackupDamaged) && !(format && errors.Is(err, ErrBackupFormat)) {
			t.Fatalf("%s: %v, want ErrBackupDamaged", what, err)
		}
		ents, _ := os.ReadDir(parent)
		if emptyDir {
			if left, _ := os.ReadDir(dst); len(ents) != 1 || len(left) != 0 {
				t.Fatalf("%s: left %v in the parent, %v in the target", what, ents, left)
			}
		} else if len(ents) != 0 {
			t.Fatalf("%s: left %v", what, ents)
		}
	}
	for _, off := range offs {
		b := bytes.Clone(good)
		b[off] ^= 0x20
		try(t, fmt.Sprintf("flipped byte %d of %d", off, len(good)), b, off%2 == 0)
	}
	for _, off := range offs {
		try(t, fmt.Sprintf("cut at %d of %d", off, len(good)), good[:off], off%2 == 1)
	}
	try(t, "a byte added", append(bytes.Clone(good), 0), true)
	t.Logf("%d damaged and %d truncated files refused (%d bytes, %d records)", len(offs), len(offs), len(good), info.Records)

	dst := filepath.Join(t.TempDir(), "dst")
	if _, err := RestoreBackup(ctx, path, Options{Dir: dst, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	if got := contents(t, openTest(t, Options{Dir: dst, NoSync: true})); len(got) != 1500 || !bytes.Equal(got["k1499"], value(0, 1499)) {
		t.Fatalf("restored %d keys, k1499 %.40q", len(got), got["k1499"])
	}
}

// TestRestoreRefusesTarget: a directory that holds anything, or a file,
// is never restored into, and is left as it was.
func TestRestoreRefusesTarget(t *testing.T) {
	src := openTest(t, Options{Dir: t.TempDir(), NoSync: true})
	fill(t, src, 10)
	path, _ := backupFile(t, src)
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "precious"), []byte("keep"), 0o600)
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, []byte("keep"), 0o600)
	for _, dst := range []string{full, file} {
		if _, err := RestoreBackup(context.Background(), path, Options{Dir: dst}); !errors.Is(err, ErrNotEmpty) {
			t.Fatalf("%s: %v, want ErrNotEmpty", dst, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(full, "precious")); string(b) != "keep" {
		t.Fatalf("precious: %q", b)
	}
	if ents, _ := os.ReadDir(full); len(ents) != 1 {
		t.Fatalf("target holds %v", ents)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Fatalf("file: %q", b)
	}
}

// TestBackupEncrypted: the backup of an encrypted directory holds no
// plaintext, restores only with the directory's key, and the restored
// directory is encrypted under it. A plaintext backup restored with a key
// makes an encrypted directory.
func TestBackupEncrypted(t *testing.T) {
	ctx := context.Background()
	k := key(32, 7)
	src := openTest(t, Options{Dir: t.TempDir(), NoSync: true, EncryptionKey: k})
	writeSecret(t, src)
	path, info := backupFile(t, src)
	if !info.Encrypted || info.Records != 2 {
		t.Fatalf("%+v", info)
	}
	if hits := testutil.FilesContaining(t, filepath.Dir(path), secret); len(hits) != 0 {
		t.Fatalf("plaintext in %v", hits)
	}
	for name, kk := range map[string][]byte{"no key": nil, "wrong key": key(32, 8), "short key": key(16, 7)} {
		dst := filepath.Join(t.TempDir(), "dst")
		if _, err := RestoreBackup(ctx, path, Options{Dir: dst, EncryptionKey: kk}); !errors.Is(err, ErrBackupKey) {
			t.Fatalf("%s: %v, want ErrBackupKey", name, err)
		}
		if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: target %v", name, err)
		}
	}
	dst := filepath.Join(t.TempDir(), "dst")
	if _, err := RestoreBackup(ctx, path, Options{Dir: dst, EncryptionKey: k}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dst}); !errors.Is(err, ErrEncryptionKey) {
		t.Fatalf("restored directory opened without its key: %v", err)
	}
	if got := contents(t, openTest(t, Options{Dir: dst, EncryptionKey: k})); string(got["small/"+secret]) != secret || len(got["large"]) != 200*(len(secret)+1) {
		t.Fatalf("restored %d keys", len(got))
	}

	plain := openTest(t, Options{Dir: t.TempDir(), NoSync: true})
	writeSecret(t, plain)
	ppath, pinfo := backupFile(t, plain)
	if pinfo.Encrypted {
		t.Fatal("plaintext directory made an encrypted backup")
	}
	dst2 := filepath.Join(t.TempDir(), "dst")
	if _, err := RestoreBackup(ctx, ppath, Options{Dir: dst2, EncryptionKey: k}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dst2}); !errors.Is(err, ErrEncryptionKey) {
		t.Fatalf("restored with a key, opened without: %v", err)
	}
}

// benchDB fills a database with 64 MiB of values, 4 KiB each (value log)
// and keys of 16 bytes, and returns it.
func benchDB(b *testing.B) *DB {
	b.Helper()
	db, err := Open(Options{Dir: b.TempDir(), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	wb := db.Badger().NewWriteBatch()
	v := bytes.Repeat([]byte("memosrt backup benchmark value. "), 128)
	for i := range 16384 {
		if err := wb.Set(fmt.Appendf(nil, "bench/k%08d", i), v); err != nil {
			b.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		b.Fatal(err)
	}
	return db
}

// BenchmarkBackup writes the backup of 64 MiB (16,384 values of 4 KiB)
// to a file; MB/s counts the keys and values.
func BenchmarkBackup(b *testing.B) {
	for _, enc := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "encrypted"}[enc], func(b *testing.B) {
			db := benchDB(b)
			if enc {
				db.key = key(32, 9) // only the file is encrypted here
			}
			path := filepath.Join(b.TempDir(), "b.backup")
			for b.Loop() {
				f, err := os.Create(path)
				if err != nil {
					b.Fatal(err)
				}
				info, err := db.Backup(context.Background(), f, BackupOptions{})
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
				b.SetBytes(info.Bytes)
			}
		})
	}
}

// BenchmarkRestore verifies and restores that backup into a new directory
// (fsync on, as memosrt restore); MB/s counts the keys and values.
func BenchmarkRestore(b *testing.B) {
	db := benchDB(b)
	path := filepath.Join(b.TempDir(), "b.backup")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	info, err := db.Backup(context.Background(), f, BackupOptions{})
	if err != nil {
		b.Fatal(err)
	}
	f.Close()
	b.SetBytes(info.Bytes)
	for i := 0; b.Loop(); i++ {
		if _, err := RestoreBackup(context.Background(), path, Options{Dir: filepath.Join(b.TempDir(), fmt.Sprint(i))}); err != nil {
			b.Fatal(err)
		}
	}
}

// Restoring onto a filesystem too small for the backup stops with
// ErrNoSpace, not SIGBUS in Badger's mapped files, and leaves neither the
// target nor its temporary directory; the same file restores where there
// is room.
func TestRestoreFullDisk(t *testing.T) {
	src := openTest(t, Options{Dir: t.TempDir(), NoSync: true})
	// 8 MiB in 4 KiB values, slices of one incompressible stream
	vals := markedValue("", 8<<20)
	wb := src.Badger().NewWriteBatch()
	for i := range 2048 {
		if err := wb.Set(fmt.Appendf(nil, "k%04d", i), vals[i<<12:(i+1)<<12]); err != nil {
			t.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
	path, _ := backupFile(t, src)
	mnt := testfs.Tmpfs(t, "10m")
	dst := filepath.Join(mnt, "restored")
	if _, err := RestoreBackup(context.Background(), path, Options{Dir: dst, NoSync: true}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("restore onto 10 MiB: %v, want ErrNoSpace", err)
	}
	if ents, err := os.ReadDir(mnt); err != nil || len(ents) != 0 {
		t.Fatalf("after the refused restore the filesystem holds %v (%v), want nothing", ents, err)
	}
	dst = filepath.Join(t.TempDir(), "restored")
	if _, err := RestoreBackup(context.Background(), path, Options{Dir: dst, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	if got := contents(t, openTest(t, Options{Dir: dst, NoSync: true})); len(got) != 2048 || !bytes.Equal(got["k2047"], vals[2047<<12:]) {
		t.Fatalf("restored %d keys, k2047 %d bytes", len(got), len(got["k2047"]))
	}
}
