package datadir

import (
	"fmt"
	"io"
	"path/filepath"
)

// guardEvery is how many bytes a GuardWrites writer lets through between
// two checks of the free space, bytes: each check requires this much above
// the reserve, so that the writes up to the next check cannot cut into it.
const guardEvery = 1 << 20

// Reserve returns the free space, bytes, that the store of the data
// directory dir keeps on its filesystem before it lets a write in: Room's
// need for an empty commit (see DB.need), with the memtable and value-log
// file sizes Open picks for that filesystem (Options.MemTableSize and
// ValueLogFileSize, when set, keep more). ok is false where free space
// cannot be read (not Linux or macOS) or dir cannot be read.
func Reserve(dir string) (n int64, ok bool) {
	_, total, ok := diskSpace(dir)
	if !ok {
		return 0, false
	}
	f, err := readDirFiles(dir)
	if err != nil {
		return 0, false
	}
	memSize, vlogSize := fileSizes(total)
	return (&DB{memSize: memSize, vlogSize: vlogSize}).need(f, 0), true
}

// GuardWrites returns w wrapped for a file at path (a backup) written
// while the store of the data directory dir may run: when path lies on
// dir's filesystem, the file must leave the store's reserve free (Reserve),
// or the store would refuse its next write, and its background writes (a
// memtable flush, a compaction) could fault on a full disk. The free space
// is checked now and then before every 1 MiB written; a write that would
// cut into the reserve is refused with an error wrapping ErrNoSpace that
// names the file, the directory, the free bytes and the bytes needed, and
// nothing of it is written (the caller removes the partial file). The
// same error, at once, when the reserve is not free now. On another
// filesystem, or where free space cannot be read, w is returned as is.
func GuardWrites(dir, path string, w io.Writer) (io.Writer, error) {
	same, ok := sameFS(dir, filepath.Dir(path))
	if !ok || !same {
		return w, nil
	}
	g := &guard{w: w, dir: dir, path: path}
	if err := g.check(0); err != nil {
		return nil, err
	}
	return g, nil
}

// guard is GuardWrites' writer; not safe for concurrent use.
type guard struct {
	w         io.Writer
	dir, path string
	written   int64 // bytes written through it
	allowed   int64 // bytes it may still write before the next check
}

func (g *guard) Write(p []byte) (int, error) {
	if int64(len(p)) > g.allowed {
		if err := g.check(int64(len(p))); err != nil {
			return 0, err
		}
	}
	n, err := g.w.Write(p)
	g.written += int64(n)
	g.allowed -= int64(n)
	return n, err
}

// check requires the reserve plus n plus guardEvery free, and lets
// n+guardEvery bytes through until the next check.
func (g *guard) check(n int64) error {
	free, _, ok := diskSpace(g.dir)
	reserve, rok := Reserve(g.dir)
	if !ok || !rok {
		g.allowed = n + guardEvery
		return nil
	}
	if need := reserve + n + guardEvery; free < need {
		return fmt.Errorf("%w for %s beside the data directory %s: %s free, %s needed (the store's reserve %s, the next %s of the file; %s written): "+
			"write it to another filesystem, or free space",
			ErrNoSpace, g.path, g.dir, mib(free), mib(need), mib(reserve), mib(n+guardEvery), mib(g.written))
	}
	g.allowed = n + guardEvery
	return nil
}
