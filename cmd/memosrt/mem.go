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

	"github.com/memosrt/memosrt/badger"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/textmem"
)

// stores is what a command opens in a data directory.
type stores struct {
	db  *badger.DB
	mem *textmem.Store
	kv  *kvcache.Cache
}

// storeFlags are the data-directory flags of every command that opens one.
type storeFlags struct {
	db, keyFile *string
}

func addStoreFlags(fs *flag.FlagSet) storeFlags {
	return storeFlags{
		db:      fs.String("db", envOr("MEMOSRT_DB", ""), "data directory"),
		keyFile: fs.String("encrypt-key-file", envOr("MEMOSRT_ENCRYPT_KEY_FILE", ""), keyFileUsage),
	}
}

// open opens the data directory the flags name.
func (f storeFlags) open() (*stores, error) { return openStores(*f.db, *f.keyFile) }

// openStores opens the data directory dir, encrypted with the key in
// keyFile when it is not "" (see readKeyFile).
func openStores(dir, keyFile string) (*stores, error) {
	if dir == "" {
		return nil, errors.New("--db is required (or set MEMOSRT_DB)")
	}
	key, err := readKeyFile(keyFile)
	if err != nil {
		return nil, err
	}
	db, err := badger.Open(badger.Options{Dir: dir, EncryptionKey: key, Logger: logger()})
	if errors.Is(err, badger.ErrEncryptionKey) {
		return nil, fmt.Errorf("%w (--encrypt-key-file)", err)
	}
	if err != nil {
		return nil, err
	}
	mem, err := textmem.Open(db, textmem.Options{Logger: logger()})
	if err != nil {
		db.Close()
		return nil, err
	}
	kv, err := kvcache.Open(db, kvcache.Options{Logger: logger()})
	if err != nil {
		mem.Close()
		db.Close()
		return nil, err
	}
	return &stores{db: db, mem: mem, kv: kv}, nil
}

func (s *stores) Close() error {
	return errors.Join(s.kv.Close(), s.mem.Close(), s.db.Close())
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
	s, err := sf.open()
	if err != nil {
		return err
	}
	defer s.Close()
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
		got, err := s.mem.Add(ctx, *cube, m)
		if err != nil {
			return err
		}
		if *asJSON {
			return out(got)
		}
		fmt.Println(got.ID)
	case "ls":
		ms, err := s.mem.List(ctx, *cube)
		if err != nil {
			return err
		}
		if *asJSON {
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
		hits, err := s.mem.Search(ctx, *cube, pos[0], *k)
		if err != nil {
			return err
		}
		if *asJSON {
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
		return s.mem.Delete(ctx, *cube, pos[0])
	default:
		return fmt.Errorf("unknown mem command %q (add, ls, search, rm)", sub)
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
