package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/internal/serveclient"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/atomicfile"
)

func newBackupCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "backup",
		Short: "Write an online, consistent backup of a data directory to a file",
		Long: "Write a consistent snapshot of the data directory to a file. With a memosrt serve running on\n" +
			"the directory the server writes it while it keeps serving (GET /v1/backup); otherwise the\n" +
			"directory is opened here. The file is checked whole before it takes its name; an existing\n" +
			"file is never overwritten. A backup of an encrypted directory is encrypted under its key.\n" +
			"Restore it with memosrt restore.",
		Args: cli.NoArgs,
	}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	out := fs.StringP("output", "o", "", "backup `FILE` to write (required; must not exist)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if *out == "" {
			return errors.New("--output is required")
		}
		if *sf.db == "" {
			return errors.New("--db is required (or set MEMOSRT_DB)")
		}
		if _, err := os.Lstat(*out); err == nil {
			return fmt.Errorf("--output %s: the file exists; remove it or choose another name", *out)
		}
		key, err := readKeyFile(*sf.keyFile)
		if err != nil {
			return err
		}
		return backup(cmd.Context(), *sf.db, key, *out)
	}
	return c
}

// backup writes the backup of dir to out: through the server running on
// dir, else from dir opened here. The file is written beside out and
// renamed to it once verified (datadir.VerifyBackup; an encrypted backup
// is verified only when key is given). On dir's own filesystem the file
// may not cut into the store's free-space reserve (datadir.GuardWrites):
// the backup stops with ErrNoSpace and the partial file is removed.
func backup(ctx context.Context, dir string, key []byte, out string) error {
	how := "offline"
	err := atomicfile.Write(out, 0o600, func(f *os.File) error {
		// on the directory's own filesystem the file must leave the
		// store's free-space reserve alone
		w, err := datadir.GuardWrites(dir, out, f)
		if err != nil {
			return err
		}
		if r, ok := serveclient.Find(dir); ok {
			how = "online, through the memosrt serve at " + r.URL()
			return r.Backup(ctx, w)
		}
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("data directory %s: not a directory", dir)
		}
		opts := datadir.Options{Dir: dir, EncryptionKey: key, NoCompactOnOpen: true, Logger: logger()}
		db, err := datadir.Open(opts)
		if errors.Is(err, datadir.ErrNoSpace) {
			// too full to open to write (the store compacts at open): a
			// read-only open writes nothing and reads the same records,
			// the last run's memtable logs replayed in memory
			opts.ReadOnly = true
			db, err = datadir.Open(opts)
		}
		if errors.Is(err, errEncryptionKey) {
			return fmt.Errorf("%w (--encrypt-key-file)", err)
		}
		if isLocked(err) {
			return fmt.Errorf("%w: the data directory %s is in use by another process (a `memosrt serve` that did not record %s?)", err, dir, serveclient.File)
		}
		if err != nil {
			return err
		}
		_, err = db.Backup(ctx, w, datadir.BackupOptions{Version: version})
		return errors.Join(err, db.Close())
	})
	if err != nil {
		return fmt.Errorf("backup %s: %w", dir, err)
	}
	info, err := datadir.VerifyBackup(ctx, out, key)
	note := ""
	switch {
	case errors.Is(err, datadir.ErrBackupKey) && len(key) == 0:
		note = " (encrypted; give --encrypt-key-file to verify it)"
	case err != nil:
		os.Remove(out)
		return fmt.Errorf("backup %s: the file written does not verify, removed: %w", dir, err)
	}
	fi, _ := os.Stat(out)
	fmt.Fprintf(os.Stderr, "memosrt: backup of %s (%s) written to %s: %d records, %s%s\n",
		dir, how, out, info.Records, cli.Bytes(fi.Size()), note)
	return nil
}

func newRestoreCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "restore FILE",
		Short: "Restore a backup file into a new data directory",
		Long: "Restore a file written by memosrt backup into --db, which must not exist or be empty.\n" +
			"The whole file is verified before anything is written (a truncated or damaged file is\n" +
			"refused), and the directory takes its name only once it is complete. A backup of an\n" +
			"encrypted directory needs its --encrypt-key-file; a key given for a plaintext backup\n" +
			"encrypts the restored directory.",
		Args: cli.ExactArgs(1, "one FILE argument"),
	}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if *sf.db == "" {
			return errors.New("--db is required (or set MEMOSRT_DB)")
		}
		key, err := readKeyFile(*sf.keyFile)
		if err != nil {
			return err
		}
		dir, err := filepath.Abs(*sf.db)
		if err != nil {
			return err
		}
		info, err := datadir.RestoreBackup(cmd.Context(), args[0], datadir.Options{Dir: dir, EncryptionKey: key, Logger: logger()})
		if errors.Is(err, datadir.ErrBackupKey) {
			return fmt.Errorf("%w (--encrypt-key-file)", err)
		}
		if err != nil {
			return err
		}
		enc := ""
		if len(key) > 0 {
			enc = ", encrypted at rest"
		}
		fmt.Fprintf(os.Stderr, "memosrt: restored %s into %s%s: %d records (%s), backup made by memosrt %s at %s\n",
			args[0], dir, enc, info.Records, cli.Bytes(info.Bytes), info.Version, info.Created.Format(time.RFC3339))
		return nil
	}
	return c
}
