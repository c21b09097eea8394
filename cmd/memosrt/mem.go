package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/internal/serveclient"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

// dirBackend is what the CLI's commands do on a data directory: a
// memosrt.OS opened here, or the `memosrt serve` already running on it
// (a serveclient.Client), reached over HTTP because Badger lets one process open it.
type dirBackend interface {
	AddMemory(ctx context.Context, cube string, m textmem.Memory) (textmem.Memory, error)
	Memories(ctx context.Context, cube string) ([]textmem.Memory, error)
	Search(ctx context.Context, cube string, q textmem.Query) ([]textmem.Hit, error)
	DeleteMemory(ctx context.Context, cube, id string) error
	AllPacks(ctx context.Context) ([]kvcache.Info, error)
	Tiers(ctx context.Context, cube string, limit int) (scheduler.CubeTiers, error)
	Tick(ctx context.Context) (scheduler.TickReport, error)
	Warm(ctx context.Context, cube string, wo memosrt.WarmOptions) (memosrt.PackStatus, error)
	Generate(ctx context.Context, req memosrt.Request) (*memosrt.Response, error)
	Close(ctx context.Context) error
}

// storeFlags are the data-directory flags of every command that opens one.
type storeFlags struct {
	db, keyFile *string
	// existing: the command only reads or removes, so a missing directory
	// is an error (a typo in --db must not create an empty store).
	existing bool
	// background: the command runs until stopped (mcp), so the OS's
	// background loop runs (ticks, promotions, resident packs) as in serve.
	background bool
	// oneSeq: the command serves one request and computes no pack (run),
	// so its model loads with one sequence (memosrt.Options.OneSequence)
	oneSeq bool
}

func addStoreFlags(fs *pflag.FlagSet) storeFlags {
	f := storeFlags{
		db:      fs.String("db", "", "data directory `DIR` (default $MEMOSRT_DB)"),
		keyFile: fs.String("encrypt-key-file", "", keyFileUsage),
	}
	envDefault(fs, "db", "MEMOSRT_DB")
	envDefault(fs, "encrypt-key-file", "MEMOSRT_ENCRYPT_KEY_FILE")
	return f
}

// addCubeFlag adds --cube with usage u.
func addCubeFlag(fs *pflag.FlagSet, u string) *string { return fs.String("cube", "", u) }

// checkCube refuses a --cube value that is not a cube name before anything
// is opened; required says an empty one is refused too.
func checkCube(cube string, required bool) error {
	if cube == "" {
		if required {
			return errors.New("--cube is required")
		}
		return nil
	}
	if !textmem.ValidCube(cube) {
		return fmt.Errorf("--cube %q: %w (1..64 of [A-Za-z0-9._-], not . or ..)", cube, textmem.ErrBadCube)
	}
	return nil
}

// options returns the OS options of the flags (no model).
func (f storeFlags) options() (memosrt.Options, error) {
	if *f.db == "" {
		return memosrt.Options{}, errors.New("--db is required (or set MEMOSRT_DB)")
	}
	if f.existing {
		if _, err := os.Stat(*f.db); err != nil {
			return memosrt.Options{}, fmt.Errorf("data directory: %w", err)
		}
	}
	key, err := readKeyFile(*f.keyFile)
	if err != nil {
		return memosrt.Options{}, err
	}
	return memosrt.Options{Dir: *f.db, EncryptionKey: key, Logger: logger(), NoScheduler: !f.background,
		OneSequence: f.oneSeq && !f.background}, nil
}

// open returns the server running on the directory, else the OS opened
// here; ef, when not nil, names the model to load. With a server the
// server's models serve: a --model given is still resolved (a missing file
// is an error, as without a server); when the server serves that file it
// answers with it, else stderr says the server's primary model answers and
// --model is not loaded.
func (f storeFlags) open(ctx context.Context, ef *engineFlags) (dirBackend, error) {
	if *f.db == "" {
		return nil, errors.New("--db is required (or set MEMOSRT_DB)")
	}
	if r, ok := serveclient.Find(*f.db); ok {
		if ef != nil && *ef.model != "" {
			path, _, err := resolveModel(*ef.model)
			if err != nil {
				return nil, err
			}
			primary, served, err := r.UseModel(ctx, path)
			if err != nil {
				return nil, err
			}
			if !served {
				fmt.Fprintf(os.Stderr, "memosrt: the memosrt serve running on %s does not serve --model %s; its model %s answers (--model is not loaded)\n", *f.db, *ef.model, primary)
			}
		}
		return r, nil
	}
	o, err := f.openOS(ctx, ef)
	if err != nil {
		return nil, err
	}
	return o, nil
}

// openOS opens the data directory here (never through a server).
func (f storeFlags) openOS(ctx context.Context, ef *engineFlags) (*memosrt.OS, error) {
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	if ef != nil {
		if err := ef.apply(&opts); err != nil {
			return nil, err
		}
	}
	o, err := memosrt.Open(ctx, opts)
	if errors.Is(err, errEncryptionKey) {
		return nil, fmt.Errorf("%w (--encrypt-key-file)", err)
	}
	if err != nil && isLocked(err) {
		return nil, fmt.Errorf("%w: the data directory %s is in use by another process (a `memosrt serve` that did not record %s?)", err, *f.db, serveclient.File)
	}
	if err == nil && ef != nil {
		ef.sayCapped(o.Model().NCtx)
	}
	return o, err
}

func newMemCmd() *cobra.Command {
	return cli.Group("mem", "Text-tier memories of a cube: add, list, search, remove",
		memCmd("add TEXT", "Add a memory to a cube and print its id", cli.ExactArgs(1, "one TEXT argument"), memAdd),
		memCmd("ls", "List a cube's memories", cli.NoArgs, memLs),
		memCmd("search QUERY", "Search a cube's memories (lexical and dense)", cli.ExactArgs(1, "one QUERY argument"), memSearch),
		memCmd("rm ID", "Remove a memory", cli.ExactArgs(1, "one ID argument"), memRm))
}

// memFlags are the flags of the mem commands; each command adds its own.
type memFlags struct {
	sf     storeFlags
	cube   *string
	kind   *string
	tags   *string
	k      *int
	turns  *bool
	asJSON *bool
}

// memCmd returns one mem subcommand; run gets the data directory opened.
func memCmd(use, short string, args cobra.PositionalArgs, run func(ctx context.Context, s dirBackend, f *memFlags, args []string) error) *cobra.Command {
	f := &memFlags{}
	c := &cobra.Command{Use: use, Short: short, Args: args}
	fs := c.Flags()
	fs.SortFlags = false
	f.sf = addStoreFlags(fs)
	f.cube = addCubeFlag(fs, "memory cube `NAME` (namespace)")
	sub := c.Name()
	if sub == "add" {
		f.kind = fs.String("kind", "", "memory `KIND`: fact, preference, dialog, ...")
		f.tags = fs.String("tags", "", "comma-separated `TAGS`")
	}
	if sub == "search" {
		f.k = fs.Int("k", 10, "results")
		f.turns = fs.Bool("include-turns", false, "also return recorded chat turns (kind turn), after every other memory")
	}
	if sub != "rm" {
		f.asJSON = fs.Bool("json", false, "print JSON")
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkCube(*f.cube, true); err != nil {
			return err
		}
		if f.k != nil {
			if err := checkFlags(cmd, check{"k", *f.k > 0, "1 or more"}); err != nil {
				return err
			}
		}
		f.sf.existing = sub != "add" // ls, search, rm only read or remove
		ctx := cmd.Context()
		s, err := f.sf.open(ctx, nil)
		if err != nil {
			return err
		}
		defer s.Close(context.WithoutCancel(ctx))
		return run(ctx, s, f, args)
	}
	return c
}

func memAdd(ctx context.Context, s dirBackend, f *memFlags, args []string) error {
	m := textmem.Memory{Text: args[0], Kind: *f.kind, Source: "cli"}
	if *f.tags != "" {
		m.Tags = strings.Split(*f.tags, ",")
	}
	got, err := s.AddMemory(ctx, *f.cube, m)
	if err != nil {
		return err
	}
	if *f.asJSON {
		return cli.PrintJSON(got)
	}
	fmt.Println(got.ID)
	return nil
}

func memLs(ctx context.Context, s dirBackend, f *memFlags, args []string) error {
	ms, err := s.Memories(ctx, *f.cube)
	if err != nil {
		return err
	}
	if *f.asJSON {
		if ms == nil {
			ms = []textmem.Memory{}
		}
		return cli.PrintJSON(ms)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tTEXT")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", m.ID, m.Created.Format("2006-01-02 15:04:05"), cli.OneLine(m.Text, 80))
	}
	return tw.Flush()
}

func memSearch(ctx context.Context, s dirBackend, f *memFlags, args []string) error {
	hits, err := s.Search(ctx, *f.cube, memosrt.SearchQuery(args[0], *f.k, *f.turns))
	if err != nil {
		return err
	}
	if *f.asJSON {
		if hits == nil {
			hits = []textmem.Hit{}
		}
		return cli.PrintJSON(hits)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSCORE\tTEXT")
	for _, h := range hits {
		fmt.Fprintf(tw, "%s\t%.3f\t%s\n", h.Memory.ID, h.Score, cli.OneLine(h.Memory.Text, 80))
	}
	return tw.Flush()
}

func memRm(ctx context.Context, s dirBackend, f *memFlags, args []string) error {
	return s.DeleteMemory(ctx, *f.cube, args[0])
}

var errEncryptionKey = datadir.ErrEncryptionKey

// isLocked reports Badger's directory lock held by another process.
func isLocked(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Another process is using this Badger database")
}
