//go:build linux || darwin

package datadir

import "syscall"

// diskSpace is the free space an unprivileged writer may use on the
// filesystem holding dir (statfs f_bavail*f_bsize) and its total size
// (f_blocks*f_bsize), bytes; ok false when statfs fails.
func diskSpace(dir string) (free, total int64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), true
}

// sameFS reports whether paths a and b lie on one filesystem (one st_dev);
// ok false when either cannot be stat'ed.
func sameFS(a, b string) (same, ok bool) {
	var sa, sb syscall.Stat_t
	if syscall.Stat(a, &sa) != nil || syscall.Stat(b, &sb) != nil {
		return false, false
	}
	return sa.Dev == sb.Dev, true
}
