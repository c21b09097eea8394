package datadir

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/memosrt/memosrt/internal/testfs"
)

// GuardWrites over a file beside a data directory on a 32 MiB tmpfs: with
// room, every byte goes through unchanged; with the reserve plus 1.5 MiB
// free, the first 1 MiB write passes (its check leaves the reserve free)
// and the next, which would cut into the reserve, is refused whole with
// ErrNoSpace; with less than the reserve plus 1 MiB free, GuardWrites
// refuses at once. A file on another filesystem is not guarded: w comes
// back as is.
func TestGuardWrites(t *testing.T) {
	mnt := testfs.Tmpfs(t, "32m")
	dir := filepath.Join(mnt, "db")
	d, err := Open(Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	var other bytes.Buffer
	if w, err := GuardWrites(dir, filepath.Join(t.TempDir(), "b"), &other); err != nil || w != &other {
		t.Fatalf("GuardWrites on another filesystem: %T, %v; want the writer as is", w, err)
	}

	var buf bytes.Buffer
	w, err := GuardWrites(dir, filepath.Join(mnt, "b"), &buf)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB in 1 MiB writes
	for i := 0; i < len(data); i += 1 << 20 {
		if _, err := w.Write(data[i : i+1<<20]); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("guarded writes: %d bytes through, want the %d written", buf.Len(), len(data))
	}

	reserve, ok := Reserve(dir)
	if !ok {
		t.Fatal("Reserve: free space unknown")
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	filler := filepath.Join(mnt, "filler")
	left := reserve + 3<<19 // the reserve + 1.5 MiB
	testfs.Fill(t, filler, free-left)
	buf.Reset()
	w, err = GuardWrites(dir, filepath.Join(mnt, "b"), &buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data[:1<<20]); err != nil {
		t.Fatalf("first 1 MiB with the reserve + 1.5 MiB free: %v", err)
	}
	if n, err := w.Write(data[:1<<20]); !errors.Is(err, ErrNoSpace) || n != 0 || buf.Len() != 1<<20 {
		t.Fatalf("second 1 MiB (buffered, so nothing used the disk: still refused by the check's 1 MiB ahead): %d, %v, %d through", n, err, buf.Len())
	}
	os.Remove(filler)
	testfs.Fill(t, filler, free-reserve-(1<<19))
	if _, err := GuardWrites(dir, filepath.Join(mnt, "b"), &buf); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("GuardWrites with the reserve + 0.5 MiB free: %v, want ErrNoSpace", err)
	}
}
