package memosrt

import (
	"context"
	"fmt"
	"time"

	"github.com/memosrt/memosrt/conversation"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/cubeops"
	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/gate"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

// Cube is a memory namespace: one user's, agent's or project's
// (textmem.Cube; its record is kept by textmem.CubeRegistry).
type Cube = textmem.Cube

// CreateCube creates an empty cube. Errors: textmem.ErrBadCube for a name
// outside 1..64 of [A-Za-z0-9._-], ErrCubeExists, ErrClosed.
func (o *OS) CreateCube(ctx context.Context, c Cube) (Cube, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (Cube, error) {
		c.Created = time.Time{}
		return o.cubes.Create(ctx, c)
	})
}

// Cube returns the record of cube. Errors: ErrUnknownCube, textmem.ErrBadCube.
func (o *OS) Cube(ctx context.Context, cube string) (Cube, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (Cube, error) { return o.cubes.Get(ctx, cube) })
}

// Cubes returns every cube, by name.
func (o *OS) Cubes(ctx context.Context) ([]Cube, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) ([]Cube, error) { return o.cubes.List(ctx) })
}

// DeleteCube removes a cube and everything derived from it: memories and
// their vectors, packs (the cube's and its conversation packs), tier state
// (usage, pack state, jobs, transitions), resident state, idle sequences'
// reuse, and the record. The delete commits in several transactions; a
// Backup holds it whole or not at all (datadir.DB.HoldBackup). Errors:
// ErrUnknownCube, storage errors (repeat the call: a delete cut short
// leaves part of the cube).
func (o *OS) DeleteCube(ctx context.Context, cube string) error {
	return gate.Do(o.g, ctx, func(ctx context.Context) error { return cubeops.Delete(ctx, o.stores(), cube) })
}

// TextStoreKey is the key to open Options.TextStore with when the data
// directory is encrypted with encryptionKey (32 bytes, SHA-256 of a label
// and the key): every node sharing the store uses the same
// encryptionKey. Nil for a nil key.
func TextStoreKey(encryptionKey []byte) []byte {
	return datadir.DeriveKey(encryptionKey, "memosrt shared texts")
}

// cubeDeletedElsewhere drops this node's own state of a cube another node
// sharing the text store deleted (cubeops.Drop; the memories and record
// are gone with the shared store's). It runs on the store's notice
// goroutine (textmem.Options.OnCubeDeleted), so the work is done on
// another.
func (o *OS) cubeDeletedElsewhere(cube string) {
	o.background(func() {
		if err := cubeops.Drop(o.g.Base(), o.stores(), cube); err != nil {
			o.log.Warn("dropping a cube deleted on another node", "cube", cube, "err", err)
		}
	})
}

// resyncCubes runs cubeops.Resync in the background (at Open with a
// shared text store, and on textmem.Options.OnResync).
func (o *OS) resyncCubes() {
	o.background(func() { cubeops.Resync(o.g.Base(), o.stores()) })
}

// background runs f on its own goroutine as in-flight work of the OS
// (Close waits for it); not before Open has finished, nor after Close.
func (o *OS) background(f func()) {
	if o.ready.Load() {
		o.g.Go(f)
	}
}

// AddMemory adds m to cube, creating the cube if needed (as `memosrt mem
// add` and Mem0's add do), and returns it with its id and times, under the
// write governance of issue 17: an identical memory (same normalized text
// and event time) returns the existing one and stores nothing; a memory
// that states the opposite liking of the same thing as one the cube holds
// ("I love Chinese food", then "I hate Chinese food"; convmem.Contradicts)
// supersedes it: the held memory takes m's text as its next version (its
// history keeps the old one, its change log says why, the pack holding it
// is recomputed at the next tick), so the store never loses the fact in
// between. m.Expires, when set, has the memory deleted by the first tick
// after it. Every change is logged (MemoryLog). Errors:
// textmem.ErrBadCube, textmem.ErrEmptyText, textmem.ErrTooLarge,
// textmem.ErrInvalidUTF8, textmem.ErrBadField, storage errors.
func (o *OS) AddMemory(ctx context.Context, cube string, m textmem.Memory) (textmem.Memory, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (textmem.Memory, error) {
		if !textmem.ValidCube(cube) {
			return m, fmt.Errorf("%w: %q", textmem.ErrBadCube, cube)
		}
		got, _, err := o.conv.Remember(ctx, cube, m, "api", "")
		return got, err
	})
}

// addMemory is AddMemory without governance (conversation.Hooks.AddMemory):
// textmem.CubeRegistry.Add.
func (o *OS) addMemory(ctx context.Context, cube string, m textmem.Memory) (textmem.Memory, textmem.AddOutcome, error) {
	return o.cubes.Add(ctx, cube, m)
}

// Memories returns cube's memories in canonical order (creation time, then id).
func (o *OS) Memories(ctx context.Context, cube string) ([]textmem.Memory, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) ([]textmem.Memory, error) {
		if err := o.conv.Materialize(ctx, cube); err != nil {
			return nil, err
		}
		return o.mem.List(ctx, cube)
	})
}

// Vectors returns how many of cube's memories have a stored vector of
// Options.Embedder (textmem.Store.Vectors): with one set, every memory
// written since has one. 0 without an Embedder.
func (o *OS) Vectors(ctx context.Context, cube string) (int, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (int, error) { return o.mem.Vectors(ctx, cube) })
}

// Memory returns one memory. Errors: textmem.ErrNotFound.
func (o *OS) Memory(ctx context.Context, cube, id string) (textmem.Memory, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (textmem.Memory, error) { return o.mem.Get(ctx, cube, id) })
}

// UpdateMemory replaces a memory's text (its history keeps the old one).
// A pack holding it is recomputed at the next tick; until then requests
// prefill the changed part. Errors: textmem.ErrNotFound, textmem.ErrEmptyText, ...
func (o *OS) UpdateMemory(ctx context.Context, cube, id, text string) (textmem.Memory, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (textmem.Memory, error) {
		return o.conv.Patch(ctx, cube, id, textmem.Patch{Text: &text}, convmem.Change{Op: "update", By: "api"})
	})
}

// PatchMemory changes the fields p sets (text, kind, tags, source) as one
// new version; a changed text recomputes the pack holding it at the next
// tick. Errors: textmem.ErrNotFound, textmem.ErrEmptyText,
// textmem.ErrInvalidUTF8, ...
func (o *OS) PatchMemory(ctx context.Context, cube, id string, p textmem.Patch) (textmem.Memory, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (textmem.Memory, error) {
		return o.conv.Patch(ctx, cube, id, p, convmem.Change{Op: "update", By: "api"})
	})
}

// DeleteMemory deletes a memory; it leaves the cube's pack at the next
// tick (requests never see it again: the pack is rendered from the text
// tier). Errors: textmem.ErrNotFound.
func (o *OS) DeleteMemory(ctx context.Context, cube, id string) error {
	return gate.Do(o.g, ctx, func(ctx context.Context) error { return o.conv.Delete(ctx, cube, id, "api", "") })
}

// SearchQuery returns the query a person's search runs (the memory API's
// search, MCP search_memory, `memosrt mem search`): textmem.DefaultQuery(
// text, k), leaving out the cube's recorded chat turns (Kind KindTurn:
// what was said, with the model's answers, not what is known) unless turns
// is set; OS.Search ranks them after every other hit then.
func SearchQuery(text string, k int, turns bool) textmem.Query {
	q := textmem.DefaultQuery(text, k)
	if !turns {
		q.NotKinds = []string{KindTurn}
	}
	return q
}

// Search finds cube's memories for q (textmem.Store.SearchWith: BM25 with
// stemming, neighbours, optional dense fusion; the cube's recorded turns
// included, short-term ones too, unless q.NotKinds names KindTurn, as
// SearchQuery's does), reorders the hits by the cube's best matching
// conversation sessions (conversation.Manager.Search) and counts each hit
// but short-term turns as a visit towards its heat. Recorded turns rank
// after every other hit (conversation.Manager.Search adds KindTurn to
// q.LastKinds): they are the conversation's context, and their answers
// are the model's own text, so a memory a user or an extraction wrote
// comes first whenever it is found.
func (o *OS) Search(ctx context.Context, cube string, q textmem.Query) ([]textmem.Hit, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) ([]textmem.Hit, error) {
		hits, err := o.conv.Search(ctx, cube, q)
		if err != nil {
			return nil, err
		}
		o.p.AddUses(scheduler.Uses(cube, conversation.Visited(hits), 1, 0))
		return hits, nil
	})
}
