//go:build darwin

package lora

import (
	"os"
	"syscall"
)

// changeTime is fi's status change time (ctime) in Unix nanoseconds: a
// write or a chmod sets it to now, and nothing can set it back (touch and
// cp -p restore the modification time only); 0 where the stat has none.
func changeTime(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Ctimespec.Sec)*1e9 + int64(st.Ctimespec.Nsec)
	}
	return 0
}
