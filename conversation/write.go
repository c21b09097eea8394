package conversation

import (
	"context"
	"errors"
	"fmt"

	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/textmem"
)

// Remember stores mem in cube under governance and logs it by by (why
// says why; "" is "added"): an identical memory is returned as it is
// (OpSame); a memory mem contradicts (convmem.Contradicts: the opposite
// liking of the same thing) takes mem's text as its next version
// (OpSupersede: the old text stays in its history, the change log links
// both, and the pack holding it is recomputed at the next tick); else mem
// is added through Hooks.AddMemory (OpAdd). The result says what was done.
// Errors: Hooks.AddMemory's and textmem's (textmem.ErrEmptyText,
// textmem.ErrTooLarge, ...), storage errors.
func (m *Manager) Remember(ctx context.Context, cube string, mem textmem.Memory, by, why string) (textmem.Memory, convmem.JobResult, error) {
	if mem.Kind != KindTurn && convmem.Sentiment(mem.Text) != 0 {
		hits, err := m.mem.Search(ctx, cube, mem.Text, 5)
		if err != nil {
			return textmem.Memory{}, convmem.JobResult{}, err
		}
		for _, h := range hits {
			old := h.Memory
			if old.Kind == KindTurn || !convmem.Contradicts(old.Text, mem.Text, m.store.Options().Analyzer) {
				continue
			}
			// the new statement replaces the old one whole: its source,
			// kind and expiry (none clears the old one's)
			p := textmem.Patch{Text: &mem.Text, Source: &mem.Source, Expires: &mem.Expires}
			if mem.Kind != "" {
				p.Kind = &mem.Kind
			}
			cur, err := m.Patch(ctx, cube, old.ID, p, convmem.Change{Op: convmem.OpSupersede, By: by,
				Why: fmt.Sprintf("contradicts version %d: %q", old.Version, old.Text)})
			if err != nil {
				return cur, convmem.JobResult{}, err
			}
			return cur, convmem.JobResult{MemoryID: cur.ID, Op: convmem.OpSupersede, Text: cur.Text, Version: cur.Version,
				PrevText: old.Text, PrevKind: old.Kind, PrevSource: old.Source, PrevVersion: old.Version}, nil
		}
	}
	got, how, err := m.hooks.AddMemory(ctx, cube, mem)
	if err != nil {
		return got, convmem.JobResult{}, err
	}
	res := convmem.JobResult{MemoryID: got.ID, Op: convmem.OpAdd, Text: got.Text, Version: got.Version}
	switch how {
	case textmem.Identical:
		res.Op = convmem.OpSame
		m.logChange(ctx, cube, got.ID, convmem.Change{Op: convmem.OpSame, By: by, Why: "identical add: nothing stored", Version: got.Version})
		if !mem.Expires.IsZero() && !mem.Expires.Equal(got.Expires) {
			// the one thing an identical add can change: when it expires
			if got, err = m.Patch(ctx, cube, got.ID, textmem.Patch{Expires: &mem.Expires},
				convmem.Change{Op: "update", By: by, Why: "expiry set by an identical add"}); err != nil {
				return got, res, err
			}
			res.Version = got.Version
		}
	case textmem.NearMerged:
		res.Op = "update"
		m.logChange(ctx, cube, got.ID, convmem.Change{Op: "update", By: by, Why: "near-duplicate add merged as the next version", Text: got.Text, Version: got.Version})
	default:
		if !mem.Expires.IsZero() {
			if err := m.store.SetExpiry(ctx, cube, got.ID, mem.Expires); err != nil {
				return got, res, err
			}
		}
		if why == "" {
			why = "added"
		}
		m.logChange(ctx, cube, got.ID, convmem.Change{Op: convmem.OpAdd, By: by, Why: why, Text: got.Text, Version: got.Version})
	}
	return got, res, nil
}

// logChange appends to a memory's change log; a failure is logged, not
// returned (the change itself is stored).
func (m *Manager) logChange(ctx context.Context, cube, id string, c convmem.Change) {
	if err := m.store.Log(context.WithoutCancel(ctx), cube, id, c); err != nil {
		m.log.Warn("change log", "cube", cube, "id", id, "err", err)
	}
}

// Patch applies p to memory id as one new version (textmem.Patch) and
// keeps what derives from it in step: a changed text recomputes the pack
// holding it at the next tick (Hooks.Kick) and changes its profile entry;
// a changed expiry moves its place in the expiry index; c (Text and
// Version filled in) goes into its change log. Errors: textmem.Store.Patch's
// (textmem.ErrNotFound, textmem.ErrEmptyText, ...), storage errors.
func (m *Manager) Patch(ctx context.Context, cube, id string, p textmem.Patch, c convmem.Change) (textmem.Memory, error) {
	mem, err := m.mem.Patch(ctx, cube, id, p)
	if err != nil {
		return mem, err
	}
	if p.Expires != nil {
		if err := m.store.SetExpiry(ctx, cube, id, *p.Expires); err != nil {
			return mem, err
		}
	}
	if p.Text != nil {
		m.kick()
		_ = m.store.ProfileForget(ctx, cube, id, mem.Text)
	}
	c.Text, c.Version = mem.Text, mem.Version
	m.logChange(ctx, cube, id, c)
	return mem, nil
}

// Delete deletes memory id and what derives from it (its turn record,
// profile entry and expiry), logging the delete by by with why. Errors:
// textmem.ErrNotFound, storage errors.
func (m *Manager) Delete(ctx context.Context, cube, id, by, why string) error {
	if err := m.mem.Delete(ctx, cube, id); err != nil {
		return err
	}
	m.forgetDerived(ctx, cube, id)
	m.logChange(ctx, cube, id, convmem.Change{Op: "delete", By: by, Why: why})
	return nil
}

// forgetDerived drops convmem's records of a deleted memory.
func (m *Manager) forgetDerived(ctx context.Context, cube, id string) {
	ctx = context.WithoutCancel(ctx)
	err := errors.Join(m.store.DropTurn(ctx, cube, id), m.store.ProfileForget(ctx, cube, id, ""),
		m.store.ClearExpiry(ctx, cube, id))
	if err != nil {
		m.log.Warn("records of a deleted memory", "cube", cube, "id", id, "err", err)
	}
}

// SweepExpired deletes the memories whose expiry has passed (logged with
// By "expiry"); the facade runs it at every tick. Errors: storage errors,
// ctx's.
func (m *Manager) SweepExpired(ctx context.Context) error {
	cubes, err := m.store.ExpiringCubes(ctx)
	if err != nil {
		return err
	}
	now := m.now()
	for _, c := range cubes {
		ids, err := m.store.Expired(ctx, c, now)
		if err != nil {
			return err
		}
		for _, id := range ids {
			err := m.Delete(ctx, c, id, "expiry", "expired")
			if errors.Is(err, textmem.ErrNotFound) {
				err = m.store.ClearExpiry(ctx, c, id)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}
