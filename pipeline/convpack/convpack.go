package convpack

import (
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/memchunk"
)

// Prefix starts the label of every conversation pack.
const Prefix = "conv:"

// SharedPrefix starts the label of every shared pack: the KV state of a
// prompt's preamble and its read cubes' packs (Request.ReadCubes), stored
// under their composite scope so that another request naming the same
// read cubes restores it. The label is SharedPrefix + the cubes joined by
// "+" (a character no cube name has).
const SharedPrefix = "shared:"

// Label is the label of cube's conversation packs.
func Label(cube string) string { return Prefix + cube }

// SharedLabel is the label of the shared packs of cubes.
func SharedLabel(cubes []string) string { return SharedPrefix + strings.Join(cubes, "+") }

// SharedScope is the kvcache scope of the shared packs of cubes at their
// deletion counts gens: the names and counts joined, so that a pack is
// found only by requests that name the same cubes in the same order, and
// never after one of them was deleted. "" for no cubes.
func SharedScope(cubes []string, gens []uint64) string {
	if len(cubes) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(SharedPrefix)
	for i, c := range cubes {
		if i > 0 {
			b.WriteByte('+')
		}
		b.WriteString(c + "@" + strconv.FormatUint(gens[i], 10))
	}
	return b.String()
}

// ScopeReads reports whether a slot scope holds state of cube as a read
// cube (the SharedScope part admit appends to it).
func ScopeReads(scope, cube string) bool {
	_, shared, ok := strings.Cut(scope, "\x00"+SharedPrefix)
	if !ok {
		return false
	}
	for _, part := range strings.Split(shared, "+") {
		if name, _, _ := strings.Cut(part, "@"); name == cube {
			return true
		}
	}
	return false
}

// PackCube splits a pack's label (kvcache.Info.Label, as memosrt's
// OS.AllPacks lists them) into its cube and its kind: "conv:<cube>" is a
// "conversation" pack of cube ("" for chats without a cube),
// "shared:<a>+<b>" a "shared" pack of the read cubes a and b (cube "a+b"),
// any other
// label is the cube of a "memories" pack (the activation tier's, made by a
// warm or the scheduler); "chunk:<cube>:<memory id>" is a "chunk" of one
// memory of cube (memchunk.Of).
func PackCube(label string) (cube, kind string) {
	if c, _, ok := memchunk.Of(label); ok {
		return c, "chunk"
	}
	if c, ok := strings.CutPrefix(label, Prefix); ok {
		return c, "conversation"
	}
	if c, ok := strings.CutPrefix(label, SharedPrefix); ok {
		return c, "shared" // "a+b": the read cubes whose packs it holds
	}
	return label, "memories"
}

// Continues reports whether a new state sharing n tokens with an old one
// of total tokens Continues that conversation (then the old conversation
// pack is dropped once the new one is stored): at least 3/4 shared. A
// branch from an early turn keeps the old pack.
func Continues(n, total int) bool { return total > 0 && 4*n >= 3*total }

// List returns the conversation packs of all cubes kv stores, and the
// shared packs (one budget, Options.ConvBytes), and their blob bytes.
func List(kv *kvcache.Cache) ([]kvcache.Info, int64) {
	var conv []kvcache.Info
	var total int64
	for _, pk := range kv.List("") {
		if strings.HasPrefix(pk.Label, Prefix) || strings.HasPrefix(pk.Label, SharedPrefix) {
			conv = append(conv, pk)
			total += pk.BlobBytes
		}
	}
	return conv, total
}

// Has reports whether kv stores pack id on this node (a pack found in the
// shared level only does not count: the node stores its own copy).
func Has(kv *kvcache.Cache, id string) bool {
	i, ok := kv.Info(id)
	return ok && !i.Remote
}

// InScope reports whether pack id of kv belongs to cube: labelled cube or
// "conv:"+cube. kvcache's lookup is not scoped; a pack of another cube is
// treated as a miss (a shorter pack of this cube is then not found).
func InScope(kv *kvcache.Cache, id, cube string) bool {
	pk, ok := kv.Info(id)
	return ok && (pk.Label == Label(cube) || cube != "" && pk.Label == cube)
}

// IsConv reports whether pack id of kv is a conversation pack.
func IsConv(kv *kvcache.Cache, id string) bool {
	pk, ok := kv.Info(id)
	return ok && strings.HasPrefix(pk.Label, Prefix)
}

// Trim deletes kv's oldest conversation and shared packs, never keep,
// until their blob bytes fit budget (Options.ConvBytes), and returns how
// many it deleted. A failed delete is logged and ends the trim. The
// caller holds the lock that serialises pack writes (the pipeline's kvMu).
func Trim(kv *kvcache.Cache, budget int64, keep string, log *slog.Logger) (evicted int64) {
	conv, total := List(kv)
	if total <= budget {
		return 0
	}
	slices.SortFunc(conv, func(a, b kvcache.Info) int { return a.Created.Compare(b.Created) })
	for _, pk := range conv {
		if total <= budget {
			break
		}
		if pk.ID == keep {
			continue
		}
		if err := kv.Delete(pk.ID); err != nil && !errors.Is(err, kvcache.ErrNotFound) {
			log.Warn("conversation pack over the budget not deleted", "pack", pk.ID, "err", err)
			return evicted
		}
		total -= pk.BlobBytes
		evicted++
	}
	return evicted
}

// SlotScope is the slot scope of a cube, at its deletion count gen, under an
// adapter set: state computed with other adapters, or before the cube was
// deleted, is not valid for this request. slots.Pool.Forget matches cube
// and every scope starting with cube+"\x00".
func SlotScope(cube string, gen uint64, adapterKey string) string {
	if gen == 0 && adapterKey == "" {
		return cube
	}
	return cube + "\x00" + strconv.FormatUint(gen, 10) + "\x00" + adapterKey
}
