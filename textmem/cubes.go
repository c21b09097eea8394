package textmem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/memosrt/memosrt/errkind"
)

var (
	// ErrUnknownCube is returned for a cube that was neither created nor
	// holds memories.
	ErrUnknownCube = errkind.New(errkind.NotFound, "memosrt: unknown cube")
	// ErrCubeExists is returned by CubeRegistry.Create for a name in use.
	ErrCubeExists = errkind.New(errkind.Conflict, "memosrt: cube exists")
)

// Cube is a memory namespace: one user's, agent's or project's. textmem
// knows a cube only once it holds a memory; the record lets a cube exist
// empty and carry a description.
type Cube struct {
	Name        string            `json:"name"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	// NoRecord keeps the cube's chat turns out of its memory (no turn
	// recording, see Request.Record).
	NoRecord bool `json:"no_record,omitempty"`
	// Assistant marks an assistant's cube: what the assistant learned
	// about its task. A chat that reads it (a request naming several
	// cubes) has the procedures extracted from its turns written to it,
	// the facts about the user to the user's cube (the first named).
	Assistant bool      `json:"assistant,omitempty"`
	Created   time.Time `json:"created"`
}

// CubeRegistry stores cube records in the text tier's Backend (the records
// of the embedded one are srv/cube/<name> → Cube JSON), so that nodes
// sharing a text store share their cubes. Safe for concurrent use.
type CubeRegistry struct {
	be    Backend
	store *Store
	now   func() time.Time
}

// OpenCubes returns the registry of store's backend, after giving every
// cube that holds memories but has no record one (made now).
func OpenCubes(ctx context.Context, store *Store, now func() time.Time) (*CubeRegistry, error) {
	c := &CubeRegistry{be: store.Backend(), store: store, now: now}
	if err := c.adopt(ctx); err != nil {
		return nil, fmt.Errorf("textmem: cube registry: %w", err)
	}
	return c, nil
}

// adopt registers every cube that holds memories but has no record.
func (c *CubeRegistry) adopt(ctx context.Context) error {
	names, err := c.store.Cubes(ctx)
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := c.Create(ctx, Cube{Name: n}); err != nil && !errors.Is(err, ErrCubeExists) {
			return err
		}
	}
	return nil
}

// Get returns name's record: ErrBadCube, ErrUnknownCube, storage errors.
func (c *CubeRegistry) Get(ctx context.Context, name string) (Cube, error) {
	var rec Cube
	if !ValidCube(name) {
		return rec, fmt.Errorf("%w: %q", ErrBadCube, name)
	}
	if err := ctx.Err(); err != nil {
		return rec, err
	}
	v, err := c.be.Record(ctx, name)
	if errors.Is(err, ErrNoRecord) {
		return rec, fmt.Errorf("%w: %q", ErrUnknownCube, name)
	}
	if err != nil {
		return rec, err
	}
	return rec, json.Unmarshal(v, &rec)
}

// Exists reports whether name has a record.
func (c *CubeRegistry) Exists(ctx context.Context, name string) (bool, error) {
	_, err := c.Get(ctx, name)
	if errors.Is(err, ErrUnknownCube) {
		return false, nil
	}
	return err == nil, err
}

// Create stores rec (Created: now when zero); ErrBadCube, ErrCubeExists
// if the name is taken.
func (c *CubeRegistry) Create(ctx context.Context, rec Cube) (Cube, error) {
	if !ValidCube(rec.Name) {
		return rec, fmt.Errorf("%w: %q", ErrBadCube, rec.Name)
	}
	if err := ctx.Err(); err != nil {
		return rec, err
	}
	if rec.Created.IsZero() {
		rec.Created = c.now().UTC()
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return rec, err
	}
	err = c.be.CreateRecord(ctx, rec.Name, b)
	if errors.Is(err, ErrRecordExists) {
		err = fmt.Errorf("%w: %q", ErrCubeExists, rec.Name)
	}
	return rec, err
}

// List returns every record, by name.
func (c *CubeRegistry) List(ctx context.Context) ([]Cube, error) {
	recs, err := c.be.Records(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Cube, 0, len(recs))
	for name, v := range recs {
		var rec Cube
		if err := json.Unmarshal(v, &rec); err != nil {
			return nil, fmt.Errorf("cube record %q: %w", name, err)
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Remove deletes name's record.
func (c *CubeRegistry) Remove(ctx context.Context, name string) error {
	return c.be.DeleteRecord(ctx, name)
}

// Add adds m to cube as Store.AddOutcome does, making the cube's record
// first if it has none: a shared store checks the record inside the add's
// transaction (Options.RequireRecord), and an error answered never leaves
// the memory stored (a record made after the add could meet a disk filled
// meanwhile). Refused input leaves no empty cube behind. Errors as
// Create (but ErrCubeExists) and Store.AddOutcome.
func (c *CubeRegistry) Add(ctx context.Context, cube string, m Memory) (Memory, AddOutcome, error) {
	_, err := c.Create(ctx, Cube{Name: cube})
	created := err == nil
	if err != nil && !errors.Is(err, ErrCubeExists) {
		return m, Added, err
	}
	got, how, err := c.store.AddOutcome(ctx, cube, m)
	if err != nil && created && !errors.Is(err, ErrUnavailable) {
		if l, lerr := c.store.List(ctx, cube); lerr == nil && len(l) == 0 {
			_ = c.Remove(ctx, cube)
		}
	}
	return got, how, err
}

// Ensure makes cube's record unless it has one. Errors: ErrBadCube,
// storage errors.
func (c *CubeRegistry) Ensure(ctx context.Context, cube string) error {
	if !ValidCube(cube) {
		return fmt.Errorf("%w: %q", ErrBadCube, cube)
	}
	if _, err := c.Create(ctx, Cube{Name: cube}); err != nil && !errors.Is(err, ErrCubeExists) {
		return err
	}
	return nil
}
