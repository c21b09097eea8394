package datacheck

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/textmem"
)

// ErrDamageFound is Run's error when it found damage (memosrt check exits
// with status 1 after the report).
var ErrDamageFound = errors.New("damage found")

// live reports whether version is the current version of key in db (a
// damaged value-log entry of an older version, or of a deleted key, loses
// nothing).
func live(db *datadir.DB, key []byte, version uint64) bool {
	ok := false
	db.Badger().View(func(txn *bg.Txn) error {
		item, err := txn.Get(key)
		ok = err == nil && item.Version() == version
		return nil
	})
	return ok
}

// Options tune Run.
type Options struct {
	// Key is the data directory's encryption key (nil: not encrypted).
	Key []byte
	// Repair deletes damaged packs (they are recomputed when next used)
	// and rebuilds damaged cubes' indexes from their texts; without it the
	// directory is opened read-only.
	Repair bool
	// Logger receives the stores' log lines; nil discards them.
	Logger *slog.Logger
}

// Run checks the data directory dir, which no process may have open: every
// SST block and value-log entry (read before any open, since an open to
// write truncates the newest value-log file at its first damaged entry),
// every KV pack and every cube's memory records and index. It writes the
// report to w, cube by cube, and returns ErrDamageFound when something is
// damaged; other errors are the stores' (opening, reading, repairing).
func Run(ctx context.Context, w io.Writer, dir string, o Options) error {
	key, repair := o.Key, o.Repair
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// before any open: an open to write truncates the newest value-log
	// file at its first damaged entry
	vlog, err := datadir.ScanValueLog(dir)
	if err != nil {
		return err
	}
	db, err := datadir.Open(datadir.Options{Dir: dir, EncryptionKey: key, ReadOnly: !repair, NoCompactOnOpen: true, Logger: log})
	if err != nil {
		return err
	}
	defer db.Close()
	mem, err := textmem.Open(db, textmem.Options{Logger: log})
	if err != nil {
		return err
	}
	defer mem.Close()
	kv, err := kvcache.Open(db, kvcache.Options{Logger: log})
	if err != nil {
		return err
	}
	defer kv.Close()

	cubes, err := mem.Cubes(ctx)
	if err != nil {
		return err
	}
	recs, err := mem.Backend().Records(ctx)
	if err != nil {
		return err
	}
	for c := range recs {
		if !slices.Contains(cubes, c) {
			cubes = append(cubes, c)
		}
	}
	// a cube whose keys sit in a damaged block may list nowhere: name the
	// cubes of the damaged tables' key ranges too
	for _, td := range db.TableDamage() {
		for _, k := range [][]byte{td.From, td.After, td.Through} {
			if rest, ok := strings.CutPrefix(string(k), "t/"); ok {
				if i := strings.IndexByte(rest, '/'); i > 0 && textmem.ValidCube(rest[:i]) && !slices.Contains(cubes, rest[:i]) {
					cubes = append(cubes, rest[:i])
				}
			}
		}
	}
	slices.Sort(cubes)

	found := false
	byCube := map[string][]string{} // cube ("" = none) → lines
	add := func(cube, format string, args ...any) {
		found = true
		byCube[cube] = append(byCube[cube], fmt.Sprintf(format, args...))
	}
	// cubesIn names the cubes whose keys t/<cube>/... meet (after, through].
	cubesIn := func(after, through []byte) []string {
		var out []string
		for _, c := range cubes {
			lo, hi := []byte("t/"+c+"/"), []byte("t/"+c+"0") // '0' follows '/'
			if bytes.Compare(hi, after) > 0 && bytes.Compare(lo, through) <= 0 {
				out = append(out, c)
			}
		}
		return out
	}
	packs := map[string]kvcache.PackDamage{}
	pd, err := kv.Check(ctx, repair)
	if err != nil {
		return err
	}
	for _, p := range pd {
		packs[p.ID] = p
	}
	// cubeOfKey names the cube a Badger key belongs to, and what it is.
	cubeOfKey := func(k []byte) (string, string) {
		s := string(k)
		switch {
		case strings.HasPrefix(s, "t/"):
			rest := s[2:]
			if i := strings.IndexByte(rest, '/'); i > 0 {
				return rest[:i], "record " + s
			}
		case strings.HasPrefix(s, "srv/cube/"):
			return s[len("srv/cube/"):], "cube registry record"
		case strings.HasPrefix(s, "k/b/") && len(s) >= 4+64:
			id := s[4 : 4+64]
			if info, ok := kv.Info(id); ok {
				return info.Label, "KV pack " + id[:12]
			}
			if p, ok := packs[id]; ok {
				return p.Scope, "KV pack " + id[:12]
			}
			return "", "KV pack " + id[:12] + " (no longer listed)"
		}
		return "", "key " + s
	}

	for _, d := range vlog {
		if d.Key == nil {
			add("", "value log %s at byte %d: entry damaged (key unreadable%s)", d.File, d.Offset,
				map[bool]string{true: "; the rest of the file unchecked", false: ""}[d.Rest])
			continue
		}
		k, version := d.Key, uint64(0)
		if len(k) > 8 {
			k, version = k[:len(k)-8], math.MaxUint64-binary.BigEndian.Uint64(k[len(k)-8:]) // Badger's version suffix (y.KeyWithTs)
		}
		cube, what := cubeOfKey(k)
		if !live(db, k, version) {
			fmt.Fprintf(w, "value log %s at byte %d: damaged entry of %s, no longer in use (nothing lost)\n", d.File, d.Offset, what)
			continue
		}
		add(cube, "value log %s at byte %d: %s damaged", d.File, d.Offset, what)
	}
	// an SST's damage is named for the cube of the first key lost (the
	// one after the last that read back); other cubes of its range are
	// named when their own check misses memories (below)
	tableCubes := map[string]bool{}
	for _, td := range db.TableDamage() {
		first := td.After
		if first == nil {
			first = td.From
		}
		line := fmt.Sprintf("SST %s (level %d): %d of %d keys read back in order; keys after %q through %q may be lost",
			td.File, td.Level, td.Keys, td.Want, first, td.Through)
		c, _ := cubeOfKey(first)
		if td.After != nil && !strings.HasPrefix(string(td.After), "t/") {
			c = "" // the first key lost is past a non-cube key: name the next cube in range
			if names := cubesIn(td.After, td.Through); len(names) > 0 {
				c = names[0]
			}
		}
		add(c, "%s", line)
		tableCubes[c] = true
		for _, n := range cubesIn(first, td.Through) {
			tableCubes[n] = true // rebuilt by --repair
		}
	}
	for _, p := range pd {
		add(p.Scope, "KV pack %s (label %q): %v%s", p.ID[:min(12, len(p.ID))], p.Label, p.Err,
			map[bool]string{true: ": deleted (recomputed when next used)", false: ""}[repair])
	}
	var lost []string // memories that cannot be saved
	for _, c := range cubes {
		cc, err := mem.Check(ctx, c)
		if err != nil {
			return err
		}
		for _, k := range cc.Damaged {
			add(c, "%s: damaged, its text cannot be saved", k)
			lost = append(lost, k)
		}
		for _, k := range cc.Index {
			add(c, "%s: index record damaged", k)
		}
		if cc.Missing > 0 {
			add(c, "%d memories counted by the cube's statistics do not read back (lost with a damaged SST block)", cc.Missing)
			lost = append(lost, fmt.Sprintf("%d of cube %s (records unreadable)", cc.Missing, c))
		}
		if repair && (!cc.OK() || tableCubes[c]) {
			n, err := mem.RepairIndex(ctx, c)
			if err != nil {
				return err
			}
			add(c, "index rebuilt from %d memories", n)
		}
		if len(byCube[c]) == 0 {
			fmt.Fprintf(w, "cube %s: ok (%d memories)\n", c, cc.Memories)
		}
	}
	keys := make([]string, 0, len(byCube))
	for c := range byCube {
		keys = append(keys, c)
	}
	slices.Sort(keys)
	for _, c := range keys {
		if c == "" {
			fmt.Fprintln(w, "not of a cube:")
		} else {
			fmt.Fprintf(w, "cube %s: DAMAGED\n", c)
		}
		for _, l := range byCube[c] {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	if !found {
		fmt.Fprintf(w, "%s: no damage found\n", dir)
		return nil
	}
	if repair && len(lost) > 0 {
		fmt.Fprintf(w, "memories that cannot be saved: %s\n", strings.Join(lost, ", "))
	}
	return ErrDamageFound
}
