//go:build !unix

package datadir

import "io/fs"

// allocated is the file's length where blocks are not reported.
func allocated(fi fs.FileInfo) int64 { return fi.Size() }
