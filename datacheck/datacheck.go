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
	// a cube whose record and statistics sit in a damaged block may list
	// nowhere: name the cubes whose texts' keys read back (one seek per
	// cube), and those of the damaged tables' key ranges
	err = db.Badger().View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte("t/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); {
			rest := string(it.Item().Key()[2:])
			i := strings.IndexByte(rest, '/')
			if i <= 0 {
				it.Next()
				continue
			}
			if c := rest[:i]; textmem.ValidCube(c) && !slices.Contains(cubes, c) {
				cubes = append(cubes, c)
			}
			it.Seek([]byte("t/" + rest[:i] + "0")) // '0' follows '/': the next cube
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, td := range db.TableDamage() {
		for _, k := range [][]byte{td.From, td.After, td.Through, td.BlockFrom, td.BlockNext} {
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
				return cubeOfLabel(info.Label), "KV pack " + id[:12]
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
	// what an open to write cuts off the newest value-log file with its
	// first damaged entry: name each record still in use, once
	cutBy := map[string]bool{}
	for _, d := range vlog {
		when := "the next open to write (memosrt serve, check --repair) cuts it off"
		if repair {
			when = "cut off by this check's open to write (--repair)"
		}
		keyless := 0
		for _, e := range d.Cut {
			if e.Key == nil {
				keyless++
				continue
			}
			k, version := e.Key, uint64(0)
			if len(k) > 8 {
				k, version = k[:len(k)-8], math.MaxUint64-binary.BigEndian.Uint64(k[len(k)-8:])
			}
			cube, what := cubeOfKey(k)
			if cutBy[what] || !live(db, k, version) {
				continue
			}
			cutBy[what] = true
			rel := "follows the damaged entry"
			if e.Offset < d.Offset {
				rel = "belongs to the transaction of the damaged entry"
			}
			add(cube, "value log %s at byte %d: %s %s at byte %d: %s", e.File, e.Offset, what, rel, d.Offset, when)
		}
		if keyless > 0 {
			add("?", "value log %s: %d entries follow the damaged entry at byte %d (encrypted: their records cannot be named): %s",
				d.File, keyless, d.Offset, strings.TrimSuffix(when, " it off")+map[bool]string{true: "", false: " them off"}[repair])
		}
	}
	// an SST's damage is named for every cube with keys in its damaged
	// block (the block's range from the table's index), or, when the
	// block is not known, for the cube of the first key lost (the one
	// after the last that read back); other cubes of the range after the
	// block are named when their own check misses memories (below)
	tableCubes := map[string]bool{}
	for _, td := range db.TableDamage() {
		first := td.After
		if first == nil {
			first = td.From
		}
		line := fmt.Sprintf("SST %s (level %d): %d of %d keys read back in order; keys after %q through %q may be lost",
			td.File, td.Level, td.Keys, td.Want, first, td.Through)
		if td.After == nil {
			line = fmt.Sprintf("SST %s (level %d): %d of %d keys read back in order; keys %q through %q may be lost",
				td.File, td.Level, td.Keys, td.Want, first, td.Through)
		}
		if td.Block < 0 {
			// the block is not known: the first key lost names the cube
			c, _ := cubeOfKey(first)
			if td.After != nil && !strings.HasPrefix(string(td.After), "t/") {
				c = "?" // past a non-cube key: name the next cube in range
				if names := cubesIn(td.After, td.Through); len(names) > 0 {
					c = names[0]
				}
			}
			add(c, "%s", line)
			tableCubes[c] = true
		} else {
			// the index keeps the damaged block's first key and the
			// next block's: name every cube whose texts or listed packs
			// have keys in that range, and say which keys in it may be
			// of cubes that cannot be known
			hi, end := td.BlockNext, "before"
			if hi == nil {
				hi, end = td.Through, "through"
			}
			incl := end == "through"
			line += fmt.Sprintf("; its damaged block %d holds keys from %q %s %q", td.Block, td.BlockFrom, end, hi)
			held := blockCubes(td.BlockFrom, hi, incl, cubes, kv.List(""))
			if c, what := cubeOfKey(td.BlockFrom); textmem.ValidCube(c) && !slices.Contains(held, c) && !strings.HasPrefix(what, "KV pack") {
				held = append(held, c)
			}
			for _, c := range held {
				add(c, "%s", line)
				tableCubes[c] = true
			}
			var unknown []string // families in range whose cube the damage hides
			for _, f := range unknownFamilies {
				if meets([]string{f.prefix}, td.BlockFrom, hi, incl) {
					unknown = append(unknown, f.what)
				}
			}
			switch {
			case len(unknown) > 0:
				add("?", "%s (it may hold %s: whose, cannot be known)", line, strings.Join(unknown, ", "))
			case len(held) == 0:
				add("", "%s (no cube's keys lie in that range)", line)
			}
		}
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
		switch c {
		case "":
			fmt.Fprintln(w, "not of a cube:")
		case "?":
			fmt.Fprintln(w, "of a cube that cannot be known:")
		default:
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

// unknownFamilies are the key families of a cube that a damaged block's
// range may cover without the cube being known: a cube's record and tier
// state (which cube's keys they are shows only in keys that no longer
// read back), and packs (their index record may be in the block).
var unknownFamilies = []struct{ prefix, what string }{
	{"k/", "KV packs (recomputed when next used)"},
	{"s/p/", "cubes' tier state"}, {"s/t/", "cubes' tier transitions"}, {"s/u/", "memories' usage (heat)"},
	{"srv/cube/", "cube records"},
}

// meets reports whether a key under any of prefixes lies in [lo, hi)
// ([lo, hi] with incl).
func meets(prefixes []string, lo, hi []byte, incl bool) bool {
	for _, p := range prefixes {
		end := []byte(p)
		end[len(end)-1]++ // every key under p sorts before it
		if overlaps([]byte(p), end, lo, hi, incl) {
			return true
		}
	}
	return false
}

// overlaps reports whether [a, b) meets [lo, hi) ([lo, hi] with incl).
func overlaps(a, b, lo, hi []byte, incl bool) bool {
	c := bytes.Compare(a, hi)
	return bytes.Compare(b, lo) > 0 && (c < 0 || incl && c == 0)
}

// blockCubes names the cubes (of cubes, and of packs' labels) with a key
// in [lo, hi) ([lo, hi] with incl): their texts t/<cube>/, and their
// listed packs' records k/h/<id> and chunks k/b/<id>/. Sorted.
func blockCubes(lo, hi []byte, incl bool, cubes []string, packs []kvcache.Info) []string {
	var out []string
	hit := func(c string, ranges ...string) {
		for i := 0; i+1 < len(ranges); i += 2 {
			if overlaps([]byte(ranges[i]), []byte(ranges[i+1]), lo, hi, incl) && !slices.Contains(out, c) {
				out = append(out, c)
				return
			}
		}
	}
	for _, c := range cubes {
		// '0' follows '/'
		hit(c, "t/"+c+"/", "t/"+c+"0")
	}
	for _, p := range packs {
		if c := cubeOfLabel(p.Label); textmem.ValidCube(c) {
			hit(c, "k/h/"+p.ID, "k/h/"+p.ID+"\x00", "k/b/"+p.ID+"/", "k/b/"+p.ID+"0") // "\x00" follows a whole key
		}
	}
	slices.Sort(out)
	return out
}

// cubeOfLabel is the cube a pack's label names: the label of a tier pack,
// conv:<cube> of a conversation pack, chunk:<cube>:<memory id> of a
// memory chunk; other labels (shared packs) are returned as they are.
func cubeOfLabel(label string) string {
	if c, ok := strings.CutPrefix(label, "conv:"); ok {
		return c
	}
	if rest, ok := strings.CutPrefix(label, "chunk:"); ok {
		c, _, _ := strings.Cut(rest, ":")
		return c
	}
	return label
}
