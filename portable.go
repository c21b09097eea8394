package memosrt

import (
	"context"
	"io"

	"github.com/memosrt/memosrt/cubearchive"
	"github.com/memosrt/memosrt/cubeops"
	"github.com/memosrt/memosrt/internal/gate"
)

// ArchiveVersion is the cube archive format version ExportCube writes and
// the only one ImportCube reads (package cubearchive has the layout).
const ArchiveVersion = cubearchive.Version

type (
	// ImportResult reports an ImportCube.
	ImportResult = cubeops.Result
	// ImportOptions tune ImportCube.
	ImportOptions = cubeops.Options
)

// stores are what the OS lends package cubeops.
func (o *OS) stores() cubeops.Stores {
	return cubeops.Stores{Mem: o.mem, Cubes: o.cubes, KV: o.kv, Pipeline: o.p, Keys: o.keys, Shared: o.opts.TextStore != nil,
		Log: o.log, Key: o.opts.EncryptionKey, Now: o.opts.Clock.Now, AfterTextDelete: o.afterTextDelete,
		DB: o.db, Deleting: &o.deleting}
}

// ExportCube writes cube as one archive to w: its record, memories in
// canonical order, KV pack blobs and activation tier membership
// (cubeops.Export). With Options.EncryptionKey the archive is sealed, and
// only an OS opened with the same key imports it. Errors: ErrUnknownCube,
// ErrClosed, storage errors, w's errors (part of the archive may have
// been written).
func (o *OS) ExportCube(ctx context.Context, cube string, w io.Writer) error {
	return gate.Do(o.g, ctx, func(ctx context.Context) error { return cubeops.Export(ctx, o.stores(), cube, w) })
}

// ImportCube reads a cube archive (ExportCube's) from r into a new cube
// (cubeops.Import): memories with their ids, times and versions, pack
// blobs, and, with a model loaded, the activation tier membership. A
// failed import leaves no part of the cube behind. The import commits in
// several transactions; a Backup holds it whole or not at all, and one
// begun while it reads r waits for it to end (datadir.DB.HoldBackup).
// Errors: ErrBadArchive, ErrCubeExists, *FieldError for a bad name,
// ErrClosed, storage errors.
func (o *OS) ImportCube(ctx context.Context, r io.Reader, opts ImportOptions) (ImportResult, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (ImportResult, error) { return cubeops.Import(ctx, o.stores(), r, opts) })
}
