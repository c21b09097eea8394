package testfs

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size (mount's size= syntax: "20m") on a new
// directory under t.TempDir and unmounts it in t.Cleanup. Mounting needs
// root: without it the test is skipped, unless CI is set (CI runs as root),
// where it fails.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but the test is not root: mounting a %s tmpfs needs root", size)
		}
		t.Skipf("mounting a %s tmpfs needs root; CI runs this test as root", size)
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// Fill writes a file of n bytes at path, or as many as fit before the
// filesystem answers ENOSPC, and returns the bytes written; any other
// error fails the test.
func Fill(t testing.TB, path string, n int64) int64 {
	t.Helper()
	w, err := FillFile(path, n)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// FillFile is Fill for a goroutine other than the test's: it returns the
// bytes written and the error other than ENOSPC that stopped it.
func FillFile(path string, n int64) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := bytes.Repeat([]byte{0xa5}, 64<<10)
	var w int64
	for w < n {
		k, err := f.Write(buf[:min(int64(len(buf)), n-w)])
		w += int64(k)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			return w, err
		}
	}
	return w, nil
}
