package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testfs"
)

// An offline backup of a directory on a nearly full disk, with too little
// space left to open it to write (the compaction the store starts at
// open), opens it read-only instead and writes a backup that restores
// every key.
func TestBackupOfflineNearlyFull(t *testing.T) {
	mnt := testfs.Tmpfs(t, "20m")
	dir := filepath.Join(mnt, "db")
	db, err := datadir.Open(datadir.Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	// 6 MiB of 1 KiB values that do not compress: in the tables
	const n = 6 << 10
	val := func(i int) []byte {
		b := make([]byte, 1<<10)
		x := uint64(i)*0x9E3779B97F4A7C15 + 1 // xorshift64 from a seed per key
		for j := range b {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			b[j] = byte(x)
		}
		return b
	}
	wb := db.Badger().NewWriteBatch()
	for i := range n {
		if err := wb.Set(fmt.Appendf(nil, "k%05d", i), val(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	const leave = 2 << 20 // room to open read-only (1 MiB), not to write (the tables' 6 MiB and more)
	if w := testfs.Fill(t, filepath.Join(mnt, "filler"), free-leave); w != free-leave {
		t.Fatalf("filled %d bytes of %d", w, free-leave)
	}
	if _, err := datadir.Open(datadir.Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "not enough free disk space to open") {
		t.Fatalf("open to write with 2 MiB free: %v, want refused", err)
	}
	out := filepath.Join(t.TempDir(), "b.backup")
	must(t, "backup", "--db", dir, "-o", out)
	restored := filepath.Join(t.TempDir(), "restored")
	must(t, "restore", out, "--db", restored)
	rdb, err := datadir.Open(datadir.Options{Dir: restored, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	got := 0
	txn := rdb.Badger().NewTransaction(false)
	defer txn.Discard()
	for i := range n {
		it, err := txn.Get(fmt.Appendf(nil, "k%05d", i))
		if err != nil {
			t.Fatalf("k%05d: %v", i, err)
		}
		v, err := it.ValueCopy(nil)
		if err != nil || string(v) != string(val(i)) {
			t.Fatalf("k%05d: %d bytes, %v", i, len(v), err)
		}
		got++
	}
	if got != n {
		t.Fatalf("%d keys restored, want %d", got, n)
	}
}

// fillDir writes n KiB of 1 KiB values that do not compress into the data
// directory dir (created), in its tables, and closes it.
func fillDir(t *testing.T, dir string, n int) {
	t.Helper()
	db, err := datadir.Open(datadir.Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	wb := db.Badger().NewWriteBatch()
	b := make([]byte, 1<<10)
	for i := range n {
		x := uint64(i)*0x9E3779B97F4A7C15 + 1 // xorshift64 from a seed per key
		for j := range b {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			b[j] = byte(x)
		}
		if err := wb.Set(fmt.Appendf(nil, "k%05d", i), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// leaveFree fills the filesystem of mnt (the file mnt/filler, replaced)
// until left bytes are free, and returns the filler's path.
func leaveFree(t *testing.T, mnt string, left int64) string {
	t.Helper()
	filler := filepath.Join(mnt, "filler")
	os.Remove(filler)
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free <= left {
		t.Fatalf("%d bytes free, want more than %d", free, left)
	}
	if w := testfs.Fill(t, filler, free-left); w != free-left {
		t.Fatalf("filled %d bytes of %d", w, free-left)
	}
	return filler
}

// A backup written onto the data directory's own filesystem may not eat
// the free-space reserve that keeps the store's writes safe: with 6 MiB
// of tables and the reserve plus 3 MiB free, a backup (about 6 MiB) would
// fit on the disk, but it stops once it would cut into the reserve, with
// a clear error, exit status 1 and no file left, both offline and online
// (through a memosrt serve, which goes on taking writes afterwards). The
// same backup to another filesystem is written.
func TestBackupKeepsReserve(t *testing.T) {
	mnt := testfs.Tmpfs(t, "48m")
	dir := filepath.Join(mnt, "db")
	fillDir(t, dir, 6<<10)
	out := filepath.Join(mnt, "b.backup")
	refused := func(how string, then func()) {
		t.Helper()
		reserve, ok := datadir.Reserve(dir)
		if !ok {
			t.Fatal("Reserve: free space unknown")
		}
		filler := leaveFree(t, mnt, reserve+3<<20)
		defer os.Remove(filler)
		msg, err := runCLI(t, "backup", "--db", dir, "-o", out)
		if exitCode(err) != 1 || !strings.Contains(msg, "not enough free disk space for "+mnt) || !strings.Contains(msg, "beside the data directory "+dir) ||
			!strings.Contains(msg, "write it to another filesystem, or free space") {
			t.Fatalf("%s backup onto the directory's filesystem with the reserve + 3 MiB free: %v\n%s", how, err, msg)
		}
		if left, _ := filepath.Glob(filepath.Join(mnt, "*b.backup*")); len(left) != 0 {
			t.Fatalf("%s backup refused left %v", how, left)
		}
		t.Logf("%s: %s", how, strings.TrimSpace(msg))
		then()
	}
	refused("offline", func() {})

	p := startServe(t, dir, nil)
	refused("online", func() {
		// the server's reserve is whole: it takes a write on the disk
		// as full as the refused backup left it
		if code := p.call(t, "POST", "/v1/cubes/lily/memories", map[string]any{"text": "Lily has a dog named Max."}, nil); code != 201 {
			t.Fatalf("add a memory after the refused backup: %d", code)
		}
	})
	other := filepath.Join(t.TempDir(), "b.backup")
	must(t, "backup", "--db", dir, "-o", other)
	if fi, err := os.Stat(other); err != nil || fi.Size() < 6<<20 {
		t.Fatalf("backup to another filesystem: %v, %v", fi, err)
	}
}
