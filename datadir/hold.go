package datadir

import (
	"context"
	"sync"
)

// holdGate keeps Backup's snapshot out of operations that commit in
// several transactions (HoldBackup): Backup takes its snapshot only at a
// moment when none is in progress, and holds new ones off for that
// moment. Safe for concurrent use.
type holdGate struct {
	// mu guards the fields below.
	mu sync.Mutex
	// active counts the holds in progress.
	active int
	// pending is non-nil while a snapshot waits or is being taken; it is
	// closed when the snapshot is taken (or given up), and holds begun
	// meanwhile wait on it.
	pending chan struct{}
	// idle is non-nil while a snapshot waits for active to drop to 0; the
	// release that brings it there closes it.
	idle chan struct{}
}

// hold begins a hold, first waiting for a pending snapshot to be taken,
// and returns its release, which is idempotent.
func (g *holdGate) hold() (release func()) {
	g.mu.Lock()
	for g.pending != nil {
		p := g.pending
		g.mu.Unlock()
		<-p
		g.mu.Lock()
	}
	g.active++
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.active--
			if g.active == 0 && g.idle != nil {
				close(g.idle)
				g.idle = nil
			}
		})
	}
}

// snapshot calls take once no hold is in progress, with new holds kept
// waiting until take returns. It waits for a snapshot pending before it
// first. Errors: ctx's error, while waiting (take is not called).
func (g *holdGate) snapshot(ctx context.Context, take func()) error {
	g.mu.Lock()
	for g.pending != nil {
		p := g.pending
		g.mu.Unlock()
		select {
		case <-p:
		case <-ctx.Done():
			return ctx.Err()
		}
		g.mu.Lock()
	}
	pending := make(chan struct{})
	g.pending = pending
	var idle chan struct{}
	if g.active > 0 {
		idle = make(chan struct{})
		g.idle = idle
	}
	g.mu.Unlock()
	var err error
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil {
		take() // active is 0: the last release closed idle, and no hold begins while pending is set
	}
	g.pending, g.idle = nil, nil
	close(pending)
	return err
}

// HoldBackup marks the start of an operation that commits in several
// transactions and must reach a backup whole or not at all (a cube
// delete, a cube import); call release when it has ended, failed or not
// (release is idempotent). Backup takes its snapshot only while no such
// operation is in progress: it waits for those begun before it, and one
// begun while Backup waits waits in turn until the snapshot is taken
// (the time to open a Badger read transaction; the backup's records are
// read after). Reads and writes that are not held go on throughout.
//
// Holds do not nest: an operation that holds must not call another that
// holds (a Backup waiting between the two would wait for the outer one,
// which would wait for the Backup). Safe for concurrent use.
func (d *DB) HoldBackup() (release func()) {
	return d.holds.hold()
}
