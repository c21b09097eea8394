package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/accesskey"
	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/internal/serveclient"
)

// keyStore is what `memosrt keys` does on a data directory: the OS opened
// here, or the serve running on it (a serveclient.Client, over /v1/keys with its local
// token).
type keyStore interface {
	CreateKey(ctx context.Context, spec memosrt.KeySpec) (memosrt.AccessKey, string, error)
	Keys(ctx context.Context) ([]memosrt.AccessKey, error)
	RevokeKey(ctx context.Context, id string) error
	ShareCube(ctx context.Context, cube, id string, right memosrt.KeyRight) (memosrt.AccessKey, error)
	UnshareCube(ctx context.Context, cube, id string) (memosrt.AccessKey, error)
	Close(ctx context.Context) error
}

// openKeys returns the serve running on the directory of sf, else the OS
// opened here.
func openKeys(ctx context.Context, sf storeFlags) (keyStore, error) {
	if *sf.db == "" {
		return nil, errors.New("--db is required (or set MEMOSRT_DB)")
	}
	if r, ok := serveclient.Find(*sf.db); ok {
		return r, nil
	}
	sf.existing = true // a key names cubes, which a new directory has not
	return sf.openOS(ctx, nil)
}

func newKeysCmd() *cobra.Command {
	return cli.Group("keys", "Access keys of `memosrt serve`: create, list, revoke, share a cube",
		keysCreateCmd(), keysLsCmd(), keysRevokeCmd(), keysShareCmd(), keysUnshareCmd())
}

func keysCreateCmd() *cobra.Command {
	c := &cobra.Command{Use: "create", Short: "Create an access key and print its token (shown this once)", Args: cli.NoArgs}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	cubes := fs.StringArray("cube", nil, "cube `NAME[:RIGHT]` the key may use, RIGHT read (default) or write; repeat for several cubes")
	name := fs.String("name", "", "a `LABEL` for the key, shown in lists")
	expires := fs.Duration("expires", 0, "the key stops working after `DURATION` (720h: 30 days); default never")
	asJSON := fs.Bool("json", false, "print the key and its token as JSON")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		spec := memosrt.KeySpec{Name: *name, CreatedBy: "cli"}
		if len(*cubes) == 0 {
			return errors.New("--cube is required (NAME or NAME:read or NAME:write; repeat it for several cubes)")
		}
		for _, s := range *cubes {
			g, err := accesskey.ParseGrant(s)
			if err != nil {
				return fmt.Errorf("--cube %q: %w", s, err)
			}
			spec.Grants = append(spec.Grants, g)
		}
		if err := checkFlags(cmd, check{"expires", *expires >= 0, "a positive duration"}); err != nil {
			return err
		}
		spec.ExpiresIn = *expires
		ctx := cmd.Context()
		s, err := openKeys(ctx, sf)
		if err != nil {
			return err
		}
		defer s.Close(context.WithoutCancel(ctx))
		k, tok, err := s.CreateKey(ctx, spec)
		if err != nil {
			return err
		}
		if *asJSON {
			return cli.PrintJSON(struct {
				memosrt.AccessKey
				Token string `json:"token"`
			}{k, tok})
		}
		fmt.Println(tok)
		fmt.Fprintf(os.Stderr, "key %s: %s (the token above is shown once)\n", k.ID, accesskey.FormatGrants(k.Grants))
		return nil
	}
	return c
}

func keysLsCmd() *cobra.Command {
	c := &cobra.Command{Use: "ls", Short: "List the access keys (never their tokens)", Args: cli.NoArgs}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		s, err := openKeys(ctx, sf)
		if err != nil {
			return err
		}
		defer s.Close(context.WithoutCancel(ctx))
		keys, err := s.Keys(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			if keys == nil {
				keys = []memosrt.AccessKey{}
			}
			return cli.PrintJSON(keys)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tCUBES\tCREATED\tEXPIRES")
		for _, k := range keys {
			exp := "never"
			if !k.Expires.IsZero() {
				exp = k.Expires.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, accesskey.FormatGrants(k.Grants), k.Created.Format(time.RFC3339), exp)
		}
		return tw.Flush()
	}
	return c
}

func keysRevokeCmd() *cobra.Command {
	c := &cobra.Command{Use: "revoke ID", Short: "Revoke an access key: its token is refused from the next request on",
		Args: cli.ExactArgs(1, "one key ID argument (memosrt keys ls lists them)")}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		s, err := openKeys(ctx, sf)
		if err != nil {
			return err
		}
		defer s.Close(context.WithoutCancel(ctx))
		return s.RevokeKey(ctx, args[0])
	}
	return c
}

func keysShareCmd() *cobra.Command {
	c := &cobra.Command{Use: "share ID", Short: "Share a cube with an access key: the key gets read (or --right write) on it",
		Args: cli.ExactArgs(1, "one key ID argument (memosrt keys ls lists them)")}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	cube := addCubeFlag(fs, "the cube `NAME` to share")
	right := fs.String("right", "read", "`RIGHT` on the cube: read or write (replaces the right the key had there)")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkCube(*cube, true); err != nil {
			return err
		}
		r, err := memosrt.ParseKeyRight(*right)
		if err != nil {
			return fmt.Errorf("--right %q: want read or write", *right)
		}
		ctx := cmd.Context()
		s, err := openKeys(ctx, sf)
		if err != nil {
			return err
		}
		defer s.Close(context.WithoutCancel(ctx))
		k, err := s.ShareCube(ctx, *cube, args[0], r)
		if err != nil {
			return err
		}
		fmt.Printf("key %s: %s\n", k.ID, accesskey.FormatGrants(k.Grants))
		return nil
	}
	return c
}

func keysUnshareCmd() *cobra.Command {
	c := &cobra.Command{Use: "unshare ID", Short: "Take a cube from an access key (its last cube: revoke the key instead)",
		Args: cli.ExactArgs(1, "one key ID argument (memosrt keys ls lists them)")}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	cube := addCubeFlag(fs, "the cube `NAME` to take from the key")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkCube(*cube, true); err != nil {
			return err
		}
		ctx := cmd.Context()
		s, err := openKeys(ctx, sf)
		if err != nil {
			return err
		}
		defer s.Close(context.WithoutCancel(ctx))
		k, err := s.UnshareCube(ctx, *cube, args[0])
		if err != nil {
			return err
		}
		fmt.Printf("key %s: %s\n", k.ID, accesskey.FormatGrants(k.Grants))
		return nil
	}
	return c
}
