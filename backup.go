package memosrt

import (
	"context"
	"fmt"
	"io"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/gate"
)

// Backup writes an online, consistent snapshot of the data directory's
// database to w while requests go on: every memory, cube, key, pack and
// tier record committed before the call is in it (datadir.DB.Backup; the
// file format is described there), and each cube delete or import is in
// it whole or not at all: the snapshot is taken once those in progress
// have ended. version is the memosrt version
// recorded in the file's header. The snapshot holds the activation
// tier's packs too (they are records of the same database). It does not
// hold what lives outside the database: the parametric tier's adapter
// files, and memories kept in a shared text store (Options.TextStore).
// With Options.EncryptionKey set the file is encrypted under a key derived
// from it. Restore it with datadir.RestoreBackup into a new directory. Errors:
// ErrClosed, ctx's error, w's error, a database read error (wrapped).
func (o *OS) Backup(ctx context.Context, w io.Writer, version string) (datadir.BackupInfo, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (datadir.BackupInfo, error) {
		info, err := o.db.Backup(ctx, w, datadir.BackupOptions{Version: version})
		if err != nil {
			return info, fmt.Errorf("memosrt: %w", err)
		}
		return info, nil
	})
}
