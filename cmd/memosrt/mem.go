package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/badger"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

// dirBackend is what the CLI's commands do on a data directory: a
// memosrt.OS opened here, or the `memosrt serve` already running on it
// (remote), reached over HTTP because Badger lets one process open it.
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
}

func addStoreFlags(fs *flag.FlagSet) storeFlags {
	return storeFlags{
		db:      fs.String("db", envOr("MEMOSRT_DB", ""), "data directory"),
		keyFile: fs.String("encrypt-key-file", envOr("MEMOSRT_ENCRYPT_KEY_FILE", ""), keyFileUsage),
	}
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
	return memosrt.Options{Dir: *f.db, EncryptionKey: key, Logger: logger(), NoScheduler: !f.background}, nil
}

// open returns the server running on the directory, else the OS opened
// here; ef, when not nil, names the model to load (unused with a server:
// the server's model serves).
func (f storeFlags) open(ctx context.Context, ef *engineFlags) (dirBackend, error) {
	if *f.db == "" {
		return nil, errors.New("--db is required (or set MEMOSRT_DB)")
	}
	if r, ok := runningServer(*f.db); ok {
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
		return nil, fmt.Errorf("%w: the data directory %s is in use by another process (a `memosrt serve` that did not record %s?)", err, *f.db, serveFile)
	}
	return o, err
}

func cmdMem(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: memosrt mem add|ls|search|rm --db DIR --cube NAME ...")
	}
	sub := args[0]
	fs := flag.NewFlagSet("mem "+sub, flag.ContinueOnError)
	sf := addStoreFlags(fs)
	cube := fs.String("cube", "", "memory cube (namespace)")
	kind := fs.String("kind", "", "memory kind (add): fact, preference, dialog, ...")
	tags := fs.String("tags", "", "comma-separated tags (add)")
	k := fs.Int("k", 10, "results (search)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if *cube == "" {
		return errors.New("--cube is required")
	}
	switch sub {
	case "add":
	case "ls", "search", "rm":
		sf.existing = true
	default:
		return fmt.Errorf("unknown mem command %q (add, ls, search, rm)", sub)
	}
	s, err := sf.open(ctx, nil)
	if err != nil {
		return err
	}
	defer s.Close(context.WithoutCancel(ctx))
	out := func(v any) error {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	switch sub {
	case "add":
		if len(pos) != 1 {
			return errors.New("mem add takes one TEXT argument")
		}
		m := textmem.Memory{Text: pos[0], Kind: *kind, Source: "cli"}
		if *tags != "" {
			m.Tags = strings.Split(*tags, ",")
		}
		got, err := s.AddMemory(ctx, *cube, m)
		if err != nil {
			return err
		}
		if *asJSON {
			return out(got)
		}
		fmt.Println(got.ID)
	case "ls":
		ms, err := s.Memories(ctx, *cube)
		if err != nil {
			return err
		}
		if *asJSON {
			if ms == nil {
				ms = []textmem.Memory{}
			}
			return out(ms)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tCREATED\tTEXT")
		for _, m := range ms {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", m.ID, m.Created.Format("2006-01-02 15:04:05"), oneLine(m.Text, 80))
		}
		return tw.Flush()
	case "search":
		if len(pos) != 1 {
			return errors.New("mem search takes one QUERY argument")
		}
		hits, err := s.Search(ctx, *cube, textmem.DefaultQuery(pos[0], *k))
		if err != nil {
			return err
		}
		if *asJSON {
			if hits == nil {
				hits = []textmem.Hit{}
			}
			return out(hits)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSCORE\tTEXT")
		for _, h := range hits {
			fmt.Fprintf(tw, "%s\t%.3f\t%s\n", h.Memory.ID, h.Score, oneLine(h.Memory.Text, 80))
		}
		return tw.Flush()
	case "rm":
		if len(pos) != 1 {
			return errors.New("mem rm takes one ID argument")
		}
		return s.DeleteMemory(ctx, *cube, pos[0])
	}
	return nil
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

var errEncryptionKey = badger.ErrEncryptionKey

// isLocked reports Badger's directory lock held by another process.
func isLocked(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Another process is using this Badger database")
}
