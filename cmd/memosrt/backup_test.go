package main

import (
	"fmt"
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
