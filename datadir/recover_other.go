//go:build !unix

package datadir

import "log/slog"

// removeEmptyLogs is a no-op where flock is unavailable (see recover_unix.go).
func removeEmptyLogs(string, *slog.Logger) error { return nil }
