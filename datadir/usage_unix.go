//go:build unix

package datadir

import (
	"io/fs"
	"syscall"
)

// allocated is the bytes a file takes on disk: its allocated blocks (an
// open value-log or memtable file is sparse, its length far above what is
// written).
func allocated(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
