package heat

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// Use is one recorded use of a memory (or, with ID scheduler.PackUse, of
// a cube's pack): Visits retrieval hits and Interactions turns that used it.
type Use struct {
	Cube         string
	ID           string
	Visits       int
	Interactions int
	At           time.Time // when it was used; zero: now
}

// Recorder writes uses (scheduler.Tiers.RecordUse).
type Recorder interface {
	RecordUse(ctx context.Context, uses []Use) error
}

// UsageBuffer holds recorded uses until they are written (Flush), summed
// per memory and stamped with the last use's time, so that a turn's uses
// cost no transaction of their own. Safe for concurrent use.
type UsageBuffer struct {
	// mu guards uses and since.
	mu    sync.Mutex
	uses  map[[2]string]Use // by (cube, id), counts summed
	since int               // uses recorded since the last ResetSince
}

// NewUsageBuffer returns an empty buffer.
func NewUsageBuffer() *UsageBuffer { return &UsageBuffer{uses: map[[2]string]Use{}} }

// Add buffers uses, stamped now, and returns the uses added since the
// last ResetSince (the caller's burst count).
func (b *UsageBuffer) Add(uses []Use, now time.Time) (since int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, u := range uses {
		k := [2]string{u.Cube, u.ID}
		v := b.uses[k]
		v.Cube, v.ID, v.At = u.Cube, u.ID, now
		v.Visits += u.Visits
		v.Interactions += u.Interactions
		b.uses[k] = v
	}
	b.since += len(uses)
	return b.since
}

// ResetSince starts the burst count again (a tick ran).
func (b *UsageBuffer) ResetSince() {
	b.mu.Lock()
	b.since = 0
	b.mu.Unlock()
}

// Flush writes the buffered uses with t.RecordUse (in one transaction,
// for scheduler.Tiers), by cube and id. On failure they are kept for the next Flush and the error
// is returned.
func (b *UsageBuffer) Flush(ctx context.Context, t Recorder) error {
	b.mu.Lock()
	if len(b.uses) == 0 {
		b.mu.Unlock()
		return nil
	}
	uses := make([]Use, 0, len(b.uses))
	for _, u := range b.uses {
		uses = append(uses, u)
	}
	b.uses = map[[2]string]Use{}
	b.mu.Unlock()
	slices.SortFunc(uses, func(a, c Use) int {
		if a.Cube != c.Cube {
			return cmp.Compare(a.Cube, c.Cube)
		}
		return cmp.Compare(a.ID, c.ID)
	})
	if err := t.RecordUse(ctx, uses); err != nil {
		b.addBack(uses)
		return err
	}
	return nil
}

// addBack returns uses a failed Flush took, keeping the later stamp.
func (b *UsageBuffer) addBack(uses []Use) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, u := range uses {
		k := [2]string{u.Cube, u.ID}
		v := b.uses[k]
		v.Cube, v.ID = u.Cube, u.ID
		if u.At.After(v.At) {
			v.At = u.At
		}
		v.Visits += u.Visits
		v.Interactions += u.Interactions
		b.uses[k] = v
	}
}
