package lora

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/textmem"
)

// Registry keys (see package datadir):
//
//	l/g/<name>          global adapter Record, JSON
//	l/c/<cube>/<name>   adapter Record of one cube, JSON
const (
	keyGlobal = "l/g/"
	keyCube   = "l/c/"
)

// Record is a registered adapter.
type Record struct {
	Name    string    `json:"name"`
	Cube    string    `json:"cube,omitempty"` // "" for a global adapter
	Path    string    `json:"path"`           // absolute path of the GGUF file
	SHA256  string    `json:"sha256"`         // hex digest of the file when registered
	Size    int64     `json:"size"`           // file size, bytes
	Arch    string    `json:"arch"`
	Rank    int       `json:"rank"`
	Alpha   float32   `json:"alpha"`
	Targets []string  `json:"targets"`
	Bytes   int64     `json:"bytes"` // tensor data: memory the loaded adapter takes
	Default bool      `json:"default,omitempty"`
	Added   time.Time `json:"added"`
}

// RefName is the name a loaded adapter carries in a Ref and in KV keys:
// "<name>@<first 12 hex digits of SHA256>".
func (r Record) RefName() string { return r.Name + "@" + r.SHA256[:min(12, len(r.SHA256))] }

// RegistryOptions configure a Registry. Zero means the default.
type RegistryOptions struct {
	// Now returns the current time (Record.Added). Default time.Now.
	Now func() time.Time
	// Logger; nil discards.
	Logger *slog.Logger
}

// Registry stores adapter records in Badger. Safe for concurrent use.
type Registry struct {
	db  *datadir.DB // writes through Write, which asks Room first
	now func() time.Time
	log *slog.Logger
}

// NewRegistry returns the registry of db. It does not own db.
func NewRegistry(db *datadir.DB, opts RegistryOptions) (*Registry, error) {
	if db == nil || db.Badger() == nil {
		return nil, errors.New("lora: nil database")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Registry{db: db, now: opts.Now, log: opts.Logger}, nil
}

func recordKey(cube, name string) []byte {
	if cube == "" {
		return []byte(keyGlobal + name)
	}
	return []byte(keyCube + cube + "/" + name)
}

func checkScope(cube, name string) error {
	if !textmem.ValidCube(name) {
		return fmt.Errorf("%w: adapter name %q: want 1..64 of [A-Za-z0-9._-], not . or ..", ErrBadName, name)
	}
	if cube != "" && !textmem.ValidCube(cube) {
		return fmt.Errorf("%w: cube %q", ErrBadName, cube)
	}
	return nil
}

// AddRequest registers an adapter.
type AddRequest struct {
	Name string
	Cube string // "" registers it globally
	Path string // GGUF file; stored as an absolute path
	// Default attaches the adapter (at scale 1) to every
	// request of its cube (of every cube, for a global one) that does not
	// list adapters explicitly.
	Default bool
	// Replace overwrites an existing record of the same name and scope.
	Replace bool
	// Base, if set, is checked against now (Check); otherwise only at load.
	Base *Base
}

// FileDigest returns the hex SHA-256 and size of the file at path.
func FileDigest(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("lora: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("lora: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// Add inspects the adapter file (and checks it against req.Base when given)
// and stores its record. Errors wrap ErrBadName, ErrBadAdapter or ErrExists.
func (r *Registry) Add(ctx context.Context, req AddRequest) (Record, error) {
	if err := checkScope(req.Cube, req.Name); err != nil {
		return Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	path, err := filepath.Abs(req.Path)
	if err != nil {
		return Record{}, fmt.Errorf("lora: %w", err)
	}
	f, err := Inspect(path)
	if err != nil {
		return Record{}, err
	}
	info := Info{Arch: f.Arch, Alpha: f.Alpha, Bytes: f.Bytes}
	if req.Base != nil {
		if info, err = Check(f, *req.Base); err != nil {
			return Record{}, err
		}
	} else {
		// shapes alone give the ranks and targets
		if info, err = Check(f, selfBase(f)); err != nil {
			return Record{}, err
		}
	}
	sum, size, err := FileDigest(path)
	if err != nil {
		return Record{}, err
	}
	rec := Record{Name: req.Name, Cube: req.Cube, Path: path, SHA256: sum, Size: size, Arch: info.Arch,
		Rank: info.Rank, Alpha: info.Alpha, Targets: info.Targets, Bytes: info.Bytes, Default: req.Default,
		Added: r.now().UTC()}
	b, _ := json.Marshal(rec)
	key := recordKey(req.Cube, req.Name)
	err = r.db.Write(int64(len(b)), func(txn *bg.Txn) error {
		if !req.Replace {
			if _, err := txn.Get(key); err == nil {
				return fmt.Errorf("%w: %s", ErrExists, scopeName(req.Cube, req.Name))
			} else if !errors.Is(err, bg.ErrKeyNotFound) {
				return err
			}
		}
		return txn.Set(key, b)
	})
	if err != nil {
		if errors.Is(err, ErrExists) {
			return Record{}, err
		}
		return Record{}, fmt.Errorf("lora: add %s: %w", scopeName(req.Cube, req.Name), err)
	}
	r.log.Info("adapter registered", "adapter", rec.RefName(), "cube", rec.Cube, "rank", rec.Rank, "bytes", rec.Bytes)
	return rec, nil
}

// selfBase is a base model that has exactly the shapes f's pairs imply, so
// that Check reports ranks and targets without the real base model.
func selfBase(f File) Base {
	b := Base{Arch: f.Arch, Shapes: map[string][]uint64{}}
	for name, p := range f.pairs() {
		a, bt := p[0], p[1]
		if a == nil || bt == nil {
			continue
		}
		s := []uint64{a.Shape[0], bt.Shape[1]}
		if name == "token_embd.weight" {
			s = []uint64{bt.Shape[1], a.Shape[1]}
		}
		if len(a.Shape) == 3 {
			s = append(s, a.Shape[2])
		}
		b.Shapes[name] = s
	}
	return b
}

func scopeName(cube, name string) string {
	if cube == "" {
		return name + " (global)"
	}
	return name + " (cube " + cube + ")"
}

// Remove deletes the record name of cube ("" global). Loaded copies stay in
// use by their leases and are freed by the Manager when evicted.
func (r *Registry) Remove(ctx context.Context, cube, name string) error {
	if err := checkScope(cube, name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	key := recordKey(cube, name)
	err := r.db.Update(func(txn *bg.Txn) error {
		if _, err := txn.Get(key); errors.Is(err, bg.ErrKeyNotFound) {
			return fmt.Errorf("%w: %s", ErrNotFound, scopeName(cube, name))
		} else if err != nil {
			return err
		}
		return txn.Delete(key)
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("lora: remove %s: %w", scopeName(cube, name), err)
	}
	return err
}

func (r *Registry) get(txn *bg.Txn, cube, name string) (Record, error) {
	var rec Record
	item, err := txn.Get(recordKey(cube, name))
	if err != nil {
		return rec, err
	}
	err = item.Value(func(v []byte) error { return json.Unmarshal(v, &rec) })
	return rec, err
}

// Resolve returns the adapter name as seen from cube: the cube's own record,
// else the global one. cube "" sees global adapters only.
func (r *Registry) Resolve(ctx context.Context, cube, name string) (Record, error) {
	if err := checkScope(cube, name); err != nil {
		return Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	var rec Record
	err := r.db.View(func(txn *bg.Txn) error {
		var err error
		if cube != "" {
			if rec, err = r.get(txn, cube, name); !errors.Is(err, bg.ErrKeyNotFound) {
				return err
			}
		}
		rec, err = r.get(txn, "", name)
		return err
	})
	if errors.Is(err, bg.ErrKeyNotFound) {
		where := "globally"
		if cube != "" {
			where = "for cube " + cube + " or globally"
		}
		return Record{}, fmt.Errorf("%w: %q is not registered %s", ErrNotFound, name, where)
	}
	if err != nil {
		return Record{}, fmt.Errorf("lora: resolve %s: %w", name, err)
	}
	return rec, nil
}

func (r *Registry) scan(ctx context.Context, prefix string, fn func(Record)) error {
	return r.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(prefix), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			var rec Record
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &rec) }); err != nil {
				r.log.Warn("lora: unreadable record skipped", "key", string(it.Item().Key()), "err", err)
				continue
			}
			fn(rec)
		}
		return nil
	})
}

// List returns the adapters visible from cube, sorted by name: the cube's
// own, then global ones it does not shadow. cube "" lists global adapters;
// cube "*" lists every record of every scope (global first, then by cube).
func (r *Registry) List(ctx context.Context, cube string) ([]Record, error) {
	if cube != "" && cube != "*" && !textmem.ValidCube(cube) {
		return nil, fmt.Errorf("%w: cube %q", ErrBadName, cube)
	}
	var out []Record
	if cube == "*" {
		err := r.scan(ctx, keyGlobal, func(rec Record) { out = append(out, rec) })
		if err == nil {
			err = r.scan(ctx, keyCube, func(rec Record) { out = append(out, rec) })
		}
		if err != nil {
			return nil, fmt.Errorf("lora: list: %w", err)
		}
		return out, nil
	}
	own := map[string]bool{}
	if cube != "" {
		if err := r.scan(ctx, keyCube+cube+"/", func(rec Record) { out = append(out, rec); own[rec.Name] = true }); err != nil {
			return nil, fmt.Errorf("lora: list: %w", err)
		}
	}
	if err := r.scan(ctx, keyGlobal, func(rec Record) {
		if !own[rec.Name] {
			out = append(out, rec)
		}
	}); err != nil {
		return nil, fmt.Errorf("lora: list: %w", err)
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Defaults returns the adapters visible from cube that have Default set.
func (r *Registry) Defaults(ctx context.Context, cube string) ([]Record, error) {
	all, err := r.List(ctx, cube)
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, rec := range all {
		if rec.Default {
			out = append(out, rec)
		}
	}
	return out, nil
}

// Spec names an adapter and the scale to apply it with.
type Spec struct {
	Name  string
	Scale float32
}

// String renders s as NAME:SCALE.
func (s Spec) String() string {
	return s.Name + ":" + strconv.FormatFloat(float64(s.Scale), 'g', -1, 32)
}

// ParseSpec parses "NAME" (scale 1) or "NAME:SCALE" (a finite float, may be
// 0 or negative).
func ParseSpec(s string) (Spec, error) {
	name, sc, hasScale := strings.Cut(s, ":")
	sp := Spec{Name: name, Scale: 1}
	if !textmem.ValidCube(name) {
		return sp, fmt.Errorf("%w: %q: want NAME[:SCALE], NAME 1..64 of [A-Za-z0-9._-], not . or ..", ErrBadName, s)
	}
	if hasScale {
		f, err := strconv.ParseFloat(sc, 32)
		if err != nil || f != f || f > 1e6 || f < -1e6 {
			return sp, fmt.Errorf("%w: %q: scale %q is not a finite number", ErrBadName, s, sc)
		}
		sp.Scale = float32(f)
	}
	return sp, nil
}

// ParseSpecs parses a comma-separated list of NAME[:SCALE]. "" and "none"
// give an empty, non-nil list (every adapter off).
func ParseSpecs(s string) ([]Spec, error) {
	out := []Spec{}
	if s == "" || s == "none" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		sp, err := ParseSpec(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		out = append(out, sp)
	}
	return out, nil
}
