package memory

import (
	"net/http"
	"time"
)

// handleBackup answers GET /v1/backup (admin token only): an online,
// consistent backup of the data directory (memosrt.OS.Backup), streamed
// as application/octet-stream while requests go on. Its end carries the
// file's checksum; when the backup fails midway the connection is cut
// before it, so a client never holds a file that restores partly.
func (a *API) handleBackup(w http.ResponseWriter, r *http.Request) {
	// a large directory takes longer than any per-request write deadline
	http.NewResponseController(w).SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="memosrt.backup"`)
	w.Header().Set("Cache-Control", "no-store")
	cw := &countingWriter{w: w}
	info, err := a.os.Backup(r.Context(), cw, a.opts.Version)
	if err != nil {
		if cw.n == 0 {
			a.writeError(w, r, err)
			return
		}
		a.log.Error("backup failed midway; connection cut", "bytes", cw.n, "err", err)
		panic(http.ErrAbortHandler)
	}
	a.log.Info("backup sent", "records", info.Records, "bytes", cw.n, "encrypted", info.Encrypted)
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
