package datadir

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/internal/testfs"
	"github.com/memosrt/memosrt/internal/testutil"
)

func TestFileSizes(t *testing.T) {
	for _, c := range []struct {
		total, mem, vlog int64
	}{
		{0, 8 << 20, 32 << 20},
		{20 << 20, 1 << 20, 1 << 20},
		{32 << 20, 1 << 20, 2 << 20},
		{64 << 20, 2 << 20, 4 << 20},
		{256 << 20, 8 << 20, 16 << 20},
		{1 << 30, 8 << 20, 32 << 20},
		{1 << 40, 8 << 20, 32 << 20},
	} {
		mem, vlog := fileSizes(c.total)
		if mem != c.mem || vlog != c.vlog {
			t.Errorf("fileSizes(%d) = %d, %d; want %d, %d", c.total, mem, vlog, c.mem, c.vlog)
		}
	}
}

// spaceValue is the value of key i in the full-disk tests: 3 KiB (in the
// value log) or 100 bytes (in the LSM tree), each one different.
func spaceValue(i int) []byte {
	n := 100
	if i%2 == 0 {
		n = 3 << 10
	}
	return bytes.Repeat(fmt.Appendf(nil, "v%07d.", i), n/9+1)[:n]
}

// fillUntilRefused writes keys k<from>, k<from+1>, ... through Room, as the
// owner packages do, until Room refuses; it returns the next index.
func fillUntilRefused(t *testing.T, d *DB, from int) (int, error) {
	t.Helper()
	for i := from; i < from+1_000_000; i++ {
		v := spaceValue(i)
		if err := d.Room(int64(len(v))); err != nil {
			return i, err
		}
		if err := d.Badger().Update(func(tx *bg.Txn) error { return tx.Set(fmt.Appendf(nil, "k%07d", i), v) }); err != nil {
			t.Fatalf("write %d after Room let it in: %v", i, err)
		}
	}
	t.Fatal("the filesystem never filled")
	return 0, nil
}

func checkAll(t *testing.T, d *DB, n int) {
	t.Helper()
	err := d.Badger().View(func(tx *bg.Txn) error {
		for i := range n {
			it, err := tx.Get(fmt.Appendf(nil, "k%07d", i))
			if err != nil {
				return fmt.Errorf("k%07d: %w", i, err)
			}
			v, err := it.ValueCopy(nil)
			if err != nil {
				return err
			}
			if !bytes.Equal(v, spaceValue(i)) {
				return fmt.Errorf("k%07d: %d bytes differ from the %d written", i, len(v), len(spaceValue(i)))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// On a 20 MiB tmpfs, writes let in by Room fill the disk until Room
// refuses with ErrNoSpace naming the directory and the free space; the
// process does not die by SIGBUS (Badger's mapped files), reads and a
// flush plus a full compaction (writes that bypass Room) go on; once a
// filler file is removed the next write succeeds; after a reopen every
// acknowledged value reads back byte for byte.
func TestFullDisk(t *testing.T) {
	mnt := testfs.Tmpfs(t, "20m")
	dir := filepath.Join(mnt, "db")
	filler := filepath.Join(mnt, "filler")
	// 7 MiB: when filling stops, free space may lie under the reserve by
	// more than the last write (a memtable flush takes space and adds a
	// table to the compaction reserve at once)
	if w := testfs.Fill(t, filler, 7<<20); w != 7<<20 {
		t.Fatalf("filler: %d bytes written", w)
	}
	opts := Options{Dir: dir}
	d, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() }) // the last d, before the unmount
	if d.memSize != 1<<20 || d.vlogSize != 1<<20 {
		t.Fatalf("on 20 MiB: memtable %d, value-log file %d bytes; want 1 MiB each", d.memSize, d.vlogSize)
	}
	n, err := fillUntilRefused(t, d, 0)
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("after %d writes: %v, want ErrNoSpace", n, err)
	}
	if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, " free, ") || !strings.Contains(msg, " needed") {
		t.Fatalf("message %q does not name the directory and the free and needed space", msg)
	}
	if n < 1000 {
		t.Fatalf("refused after only %d writes", n)
	}
	t.Logf("%d writes, then: %v", n, err)
	checkAll(t, d, n)

	// Badger's own writes, which no Room guards: a memtable flush (the
	// sentinel DropPrefix of reclaim) and a compaction of every table.
	if err := d.Badger().DropPrefix([]byte("!nothing")); err != nil {
		t.Fatal(err)
	}
	if err := d.Badger().Flatten(1); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Reclaim(); err != nil {
		t.Fatal(err)
	}
	checkAll(t, d, n)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := d.Room(int64(len(spaceValue(n)))); err != nil {
		t.Fatalf("after 7 MiB freed: %v", err)
	}
	m, err := fillUntilRefused(t, d, n)
	if !errors.Is(err, ErrNoSpace) || m == n {
		t.Fatalf("after the filler went: %d more writes, then %v", m-n, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(opts); err != nil {
		t.Fatal(err)
	}
	checkAll(t, d, m)
}

// Opening a data directory on a filesystem with no free space left exits
// with ErrNoSpace and its message, not SIGBUS; run in a child process (a
// SIGBUS would kill the test binary). The directory opens again, every
// value there, once space returns.
func TestOpenFullDisk(t *testing.T) {
	if dir := os.Getenv("MEMOSRT_TEST_OPEN_DIR"); dir != "" {
		d, err := Open(Options{Dir: dir})
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(3)
		}
		fmt.Println("opened")
		d.Close()
		os.Exit(0)
	}
	mnt := testfs.Tmpfs(t, "20m")
	dir := filepath.Join(mnt, "db")
	d, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close() // idempotent; the first handle, should a check fail
	n, err := fillUntilRefused(t, d, 0)
	if !errors.Is(err, ErrNoSpace) {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	testfs.Fill(t, filler, 1<<30) // every block left
	if free, _, _ := diskSpace(mnt); free != 0 {
		t.Fatalf("%d bytes still free", free)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenFullDisk$")
	cmd.Env = append(os.Environ(), "MEMOSRT_TEST_OPEN_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("child: %v (want exit status 3), output:\n%s", err, out)
	}
	want := "open: badger: not enough free disk space to open " + dir + ": 0.0 MiB (0 bytes) free, "
	if !strings.HasPrefix(string(out), want) {
		t.Fatalf("child said %q, want it to begin %q", out, want)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	checkAll(t, d, n)
}

// Opening a directory whose tables do not fit in the free space again is
// refused with ErrNoSpace, not let in to die by SIGBUS: Badger compacts
// the level-0 table that the last Close flushed as soon as it opens,
// writing a new table of up to every table's size through a mapped file
// before it deletes the old ones. Here the memtable logs and 2 MiB fit
// (what flushing them needs), the tables do not. Run in a child process,
// as TestOpenFullDisk.
func TestOpenTablesDoNotFit(t *testing.T) {
	if dir := os.Getenv("MEMOSRT_TEST_OPEN_TABLES_DIR"); dir != "" {
		d, err := Open(Options{Dir: dir})
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(3)
		}
		fmt.Println("opened")
		d.Close()
		os.Exit(0)
	}
	mnt := testfs.Tmpfs(t, "20m")
	dir := filepath.Join(mnt, "db")
	d, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close() // idempotent; the first handle, should a check fail
	// 6 MiB of 1 KiB values, under the value threshold: in the tables;
	// slices of one incompressible stream, so that the tables keep 6 MiB
	const n = 6 << 10
	vals := markedValue("", n<<10)
	val := func(i int) []byte { return vals[i<<10 : (i+1)<<10] }
	for i := range n {
		if err := d.Badger().Update(func(tx *bg.Txn) error {
			return tx.Set(fmt.Appendf(nil, "k%07d", i), val(i))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := readDirFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if f.sstBytes < 4<<20 {
		t.Fatalf("tables hold %d bytes, want at least 4 MiB for the test to mean something", f.sstBytes)
	}
	free, _, _ := diskSpace(mnt)
	leave := f.memBytes + spaceMargin + 2<<20 // what flushing needs, and 2 MiB more
	filler := filepath.Join(mnt, "filler")
	if w := testfs.Fill(t, filler, free-leave); w != free-leave {
		t.Fatalf("filled %d bytes of %d", w, free-leave)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenTablesDoNotFit$")
	cmd.Env = append(os.Environ(), "MEMOSRT_TEST_OPEN_TABLES_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("child: %v (want exit status 3), output:\n%s", err, out)
	}
	want := "open: badger: not enough free disk space to open " + dir + ": "
	if !strings.HasPrefix(string(out), want) {
		t.Fatalf("child said %q, want it to begin %q", out, want)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	err = d.Badger().View(func(tx *bg.Txn) error {
		for i := range n {
			it, err := tx.Get(fmt.Appendf(nil, "k%07d", i))
			if err != nil {
				return fmt.Errorf("k%07d: %w", i, err)
			}
			v, err := it.ValueCopy(nil)
			if err != nil {
				return err
			}
			if !bytes.Equal(v, val(i)) {
				return fmt.Errorf("k%07d: value differs", i)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkRoom is the cost of the free-space check that precedes every
// commit (Room: readdir, a stat per file, statfs) beside a commit of one
// 100-byte value without and with fsync, on a directory of 64 MiB in 4 MiB
// value-log files: docs/benchmarks.md.
func BenchmarkRoom(b *testing.B) {
	d, err := Open(Options{Dir: b.TempDir(), NoSync: true, ValueLogFileSize: 4 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	val := bytes.Repeat([]byte("x"), 64<<10)
	for i := range 1024 {
		if err := d.Badger().Update(func(tx *bg.Txn) error { return tx.Set(fmt.Appendf(nil, "big%d", i), val) }); err != nil {
			b.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(d.dir)
	b.Logf("%d files in the directory", len(ents))
	b.Run("Room", func(b *testing.B) {
		for b.Loop() {
			if err := d.Room(100); err != nil {
				b.Fatal(err)
			}
		}
	})
	small := bytes.Repeat([]byte("y"), 100)
	commit := func(d *DB) func(b *testing.B) {
		return func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				if err := d.Badger().Update(func(tx *bg.Txn) error { return tx.Set(fmt.Appendf(nil, "small%d", i), small) }); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("Commit", commit(d))
	synced, err := Open(Options{Dir: b.TempDir()}) // fsync per commit, serve's default
	if err != nil {
		b.Fatal(err)
	}
	defer synced.Close()
	b.Run("CommitSync", commit(synced))
}

// markedValue is n incompressible bytes that begin with mark.
func markedValue(mark string, n int64) []byte {
	b := make([]byte, n)
	x := uint64(88172645463325252) // xorshift64
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	copy(b, mark)
	return b
}

// The value threshold follows the memtable: half of Badger's largest
// transaction (15% of the memtable), at most 32 KiB (lsmValueMax). A
// value one byte under it commits in one transaction beside another entry
// and stays out of the value log; a value of the threshold's size goes to the value
// log; both read back. (At the largest transaction, the most Badger's
// option check allows, the first write fails with ErrTxnTooBig.) Under
// 1 MiB the memtable is refused.
func TestValueThreshold(t *testing.T) {
	for _, c := range []struct{ mem, want int64 }{
		{1 << 20, 32 << 10},
		{2 << 20, 32 << 10},
		{8 << 20, 32 << 10},
		{16 << 20, 32 << 10},
	} {
		t.Run(fmt.Sprintf("memtable_%dMiB", c.mem>>20), func(t *testing.T) {
			dir := t.TempDir()
			d, err := Open(Options{Dir: dir, NoSync: true, MemTableSize: c.mem})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if got := d.ValueThreshold(); got != c.want {
				t.Fatalf("ValueThreshold() = %d, want %d", got, c.want)
			}
			under := markedValue("UNDER-THRESHOLD-", c.want-1)
			at := markedValue("AT-THRESHOLD-", c.want)
			err = d.Badger().Update(func(tx *bg.Txn) error {
				if err := tx.Set([]byte("t/alice/m/under"), under); err != nil {
					return err
				}
				return tx.Set([]byte("t/alice/d/under"), []byte("doc record"))
			})
			if err != nil {
				t.Fatalf("a value of %d bytes beside a small one: %v", len(under), err)
			}
			if err := d.Badger().Update(func(tx *bg.Txn) error { return tx.Set([]byte("k/b/at"), at) }); err != nil {
				t.Fatalf("a value of %d bytes: %v", len(at), err)
			}
			for _, kv := range []struct {
				key, mark string
				want      []byte
				vlog      bool
			}{{"t/alice/m/under", "UNDER-THRESHOLD-", under, false}, {"k/b/at", "AT-THRESHOLD-", at, true}} {
				var inVlog bool
				for _, name := range testutil.FilesContaining(t, dir, kv.mark) {
					inVlog = inVlog || strings.HasSuffix(name, ".vlog")
				}
				if inVlog != kv.vlog {
					t.Errorf("%s (%d bytes): in the value log %v, want %v", kv.key, len(kv.want), inVlog, kv.vlog)
				}
				err := d.Badger().View(func(tx *bg.Txn) error {
					item, err := tx.Get([]byte(kv.key))
					if err != nil {
						return err
					}
					v, err := ValueCopy(item)
					if err == nil && !bytes.Equal(v, kv.want) {
						err = fmt.Errorf("%d bytes read back differ from the %d written", len(v), len(kv.want))
					}
					return err
				})
				if err != nil {
					t.Errorf("%s: %v", kv.key, err)
				}
			}
		})
	}
	if _, err := Open(Options{Dir: t.TempDir(), MemTableSize: 512 << 10}); err == nil || !strings.Contains(err.Error(), "MemTableSize") {
		t.Errorf("Open with a 512 KiB memtable: %v, want an error naming MemTableSize", err)
	}
}
