package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write creates a temporary file beside path, lets write fill it, sets perm,
// fsyncs, closes and renames it onto path. If write or any step fails, the
// temporary file is removed and path is untouched; the error names the step.
func Write(path string, perm os.FileMode, write func(f *os.File) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}
