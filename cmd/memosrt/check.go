package main

import (
	"errors"
	"fmt"
	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/internal/serveclient"
	"os"

	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt/datacheck"
)

// errDamageFound is check's error when it found damage: exit status 1
// after the report.
var errDamageFound = datacheck.ErrDamageFound

func newCheckCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "check",
		Short: "Verify every record and pack of a data directory not in use; report damage by cube",
		Long: "check reads every SST block, value-log entry, memory record and KV pack of the data directory\n" +
			"(which no memosrt may have open), verifying their checksums, and prints what is damaged by cube.\n" +
			"Exit status 1 when damage is found. --repair deletes what is recomputed (damaged packs; the\n" +
			"postings, doc records and statistics of a damaged cube, rebuilt from its texts) and lists the\n" +
			"memories that cannot be saved. See docs/data-directory.md.",
		Args: cli.NoArgs,
	}
	sf := addStoreFlags(c.Flags())
	repair := c.Flags().Bool("repair", false, "delete damaged packs and rebuild damaged indexes")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if *sf.db == "" {
			return errors.New("--db is required (or set MEMOSRT_DB)")
		}
		if _, err := os.Stat(*sf.db); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		if r, ok := serveclient.Find(*sf.db); ok {
			return fmt.Errorf("memosrt serve is running on %s (%s): stop it first, check reads the directory offline", *sf.db, r.URL())
		}
		key, err := readKeyFile(*sf.keyFile)
		if err != nil {
			return err
		}
		err = datacheck.Run(cmd.Context(), cmd.OutOrStdout(), *sf.db, datacheck.Options{Key: key, Repair: *repair, Logger: logger()})
		if isLocked(err) {
			return fmt.Errorf("%w: the data directory %s is in use by another process", err, *sf.db)
		}
		return err
	}
	return c
}
