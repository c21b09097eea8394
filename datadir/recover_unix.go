//go:build unix

package datadir

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// removeEmptyLogs deletes the 0-byte value log (*.vlog) and memtable (*.mem)
// files of dir. A crash between Badger creating one of them and writing its
// header leaves such a file, and Badger v4.9.6 then fails to open with "Create
// a new file" (dgraph-io/badger#2207, fix pending upstream in #2331). A file
// that was never written holds no entry, so nothing is lost. The directory is
// locked the way Badger locks it (flock on the directory, acquireDirectoryLock
// in dir_unix.go) while this runs; if another process or DB holds it, nothing
// is touched and Badger's open reports it.
func removeEmptyLogs(dir string, log *slog.Logger) error {
	lock, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("badger: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil // in use: leave it all to bg.Open
		}
		return fmt.Errorf("badger: lock %s: %w", dir, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("badger: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, ".vlog") && !strings.HasSuffix(name, ".mem") {
			continue
		}
		info, err := e.Info()
		if err != nil || info.Size() != 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("badger: remove empty %s: %w", name, err)
		}
		if log != nil {
			log.Warn("removed an empty log file left by a crash", "file", filepath.Join(dir, name), "src", "badger")
		}
	}
	return nil
}
