package cubeops

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/pipeline"
	"github.com/memosrt/memosrt/textmem"
)

// Deleting is the set of cubes whose delete (Delete, or Import removing
// what it wrote) is running, shared by every Stores one OS lends. The zero
// value is ready; safe for concurrent use.
type Deleting struct {
	mu sync.Mutex
	n  map[string]int // cube → deletes running; guarded by mu
}

// begin marks cube as being deleted until end is called (d nil: no mark).
func (d *Deleting) begin(cube string) (end func()) {
	if d == nil {
		return func() {}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[string]int{}
	}
	d.n[cube]++
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.n[cube]--; d.n[cube] == 0 {
			delete(d.n, cube)
		}
	}
}

// has reports whether a delete of cube is running.
func (d *Deleting) has(cube string) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[cube] > 0
}

// Warm is pipeline.Pipeline.Warm for a cube that a Delete may be removing
// meanwhile. A delete removes the memories first and the record last, so
// a warm that lists the cube between the two finds no memories; Warm then
// answers textmem.ErrUnknownCube (the cube is gone), not the *FieldError
// of a cube without memories, when o.Deleting says a delete of cube still
// runs or the record is gone by then. Errors: as pipeline.Pipeline.Warm's.
func Warm(ctx context.Context, o Stores, cube string, wo pipeline.WarmOptions) (pipeline.PackStatus, error) {
	st, err := o.Pipeline.Warm(ctx, cube, wo)
	var fe *errkind.FieldError
	if err == nil || cube == "" || !errors.As(err, &fe) || fe.Field != "cube" {
		return st, err
	}
	// in this order: a delete ending between the two has removed the record
	if o.Deleting.has(cube) {
		return pipeline.PackStatus{}, fmt.Errorf("%w: %s (deleted while warming)", textmem.ErrUnknownCube, cube)
	}
	if _, gerr := o.Cubes.Get(ctx, cube); errors.Is(gerr, textmem.ErrUnknownCube) {
		return pipeline.PackStatus{}, fmt.Errorf("%w (deleted while warming)", gerr)
	}
	return st, err
}
