package textmem

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/viterin/vek/vek32"

	"github.com/memosrt/memosrt/embed"
)

// A VectorIndex finds the stored vectors nearest to a query vector within
// one cube. Slots are the cube's document numbers. Vectors given to Add and
// Search are L2-normalised, [Dim]float32, so the inner product is the
// cosine. The Store calls a VectorIndex with the cube's index lock held:
// Add and Remove under the write lock, Search and Len under the read lock
// (concurrently with each other).
type VectorIndex interface {
	// Add stores v under slot, replacing any vector there. The index may
	// keep v.
	Add(slot uint32, v []float32)
	// Remove drops slot's vector, if any.
	Remove(slot uint32)
	// Search returns up to k slots by descending cosine with q, keeping
	// only slots keep accepts (nil keeps all).
	Search(q []float32, k int, keep func(slot uint32) bool) []VectorHit
	// Len is the number of stored vectors.
	Len() int
}

// VectorHit is a VectorIndex search result.
type VectorHit struct {
	Slot   uint32
	Cosine float32
}

// FlatIndex is the exact VectorIndex: it compares the query with every
// stored vector using SIMD inner products (github.com/viterin/vek). Not
// safe for concurrent Add/Remove; see VectorIndex for the locking the Store
// provides.
type FlatIndex struct {
	dim   int
	data  []float32      // [len(slots)][dim]
	slots []uint32       // row -> slot
	row   map[uint32]int // slot -> row
}

// NewFlatIndex returns an empty FlatIndex for dim-long vectors.
func NewFlatIndex(dim int) *FlatIndex {
	return &FlatIndex{dim: dim, row: make(map[uint32]int)}
}

// Add implements VectorIndex.
func (f *FlatIndex) Add(slot uint32, v []float32) {
	if r, ok := f.row[slot]; ok {
		copy(f.data[r*f.dim:(r+1)*f.dim], v)
		return
	}
	f.row[slot] = len(f.slots)
	f.slots = append(f.slots, slot)
	f.data = append(f.data, v...)
}

// Remove implements VectorIndex by moving the last row into the hole.
func (f *FlatIndex) Remove(slot uint32) {
	r, ok := f.row[slot]
	if !ok {
		return
	}
	last := len(f.slots) - 1
	if r != last {
		copy(f.data[r*f.dim:(r+1)*f.dim], f.data[last*f.dim:])
		f.slots[r] = f.slots[last]
		f.row[f.slots[r]] = r
	}
	f.slots = f.slots[:last]
	f.data = f.data[:last*f.dim]
	delete(f.row, slot)
}

// Len implements VectorIndex.
func (f *FlatIndex) Len() int { return len(f.slots) }

// HeapBytes estimates the heap f holds, in bytes: its vectors and slot
// list at their capacity and its slot map at a slot an entry (see mapSlot).
func (f *FlatIndex) HeapBytes() int64 {
	return int64(cap(f.data))*4 + int64(cap(f.slots))*4 + int64(len(f.row))*(8+8+1)*4/3 // uint32 key padded to 8, int element: see mapSlot
}

// Search implements VectorIndex.
func (f *FlatIndex) Search(q []float32, k int, keep func(uint32) bool) []VectorHit {
	if len(q) != f.dim || k <= 0 {
		return nil
	}
	var out []VectorHit
	worst := float32(math.Inf(-1))
	for r, slot := range f.slots {
		if keep != nil && !keep(slot) {
			continue
		}
		c := vek32.Dot(q, f.data[r*f.dim:(r+1)*f.dim])
		if len(out) == k && c <= worst {
			continue
		}
		// Insertion into a short sorted list; k is small (≤ a few hundred).
		i := len(out)
		for i > 0 && (out[i-1].Cosine < c || out[i-1].Cosine == c && out[i-1].Slot > slot) {
			i--
		}
		out = append(out, VectorHit{})
		copy(out[i+1:], out[i:])
		out[i] = VectorHit{slot, c}
		if len(out) > k {
			out = out[:k]
		}
		worst = out[len(out)-1].Cosine
	}
	return out
}

// encodeVector stores the embedder name with the vector, so that vectors
// of another model are never compared with this one's:
// uvarint len(name) | name | [dim]float32 little endian.
func encodeVector(name string, v []float32) []byte {
	b := appendString(make([]byte, 0, len(name)+2+4*len(v)), name)
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func decodeVector(b []byte) (string, []float32, error) {
	r := reader{b: b}
	name := r.str()
	if r.bad || len(r.b)%4 != 0 {
		return "", nil, errCorrupt
	}
	v := make([]float32, len(r.b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(r.b[4*i:]))
	}
	return name, v, nil
}

// embedText returns the normalised vector of text, or nil without an
// Embedder.
func (s *Store) embedText(ctx context.Context, text string) ([]float32, error) {
	e := s.opts.Embedder
	if e == nil {
		return nil, nil
	}
	v, err := e.Embed(ctx, []string{text})
	if err != nil {
		return nil, fmt.Errorf("textmem: embed with %s: %w", e.Name(), err)
	}
	if len(v) != 1 || len(v[0]) != e.Dim() {
		return nil, fmt.Errorf("%w: %s gave %d vectors, want 1 of %d dims", embed.ErrShape, e.Name(), len(v), e.Dim())
	}
	// a memory is never stored without its vector, nor with one that
	// cannot be compared (NaN, Inf, all zeros)
	if err := embed.Valid(v[0]); err != nil {
		return nil, fmt.Errorf("textmem: embed with %s: %w", e.Name(), err)
	}
	return embed.Normalize(v[0]), nil
}

// Vectors returns how many memories of cube have a stored vector of the
// Store's Embedder (its Name and Dim); 0 without an Embedder. It reads
// the stored records, not the index. Errors: ErrBadCube, ErrClosed,
// storage errors.
func (s *Store) Vectors(ctx context.Context, cube string) (int, error) {
	if err := checkCube(cube); err != nil {
		return 0, err
	}
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	e := s.opts.Embedder
	if e == nil {
		return 0, nil
	}
	n := 0
	err := s.be.View(ctx, cube, func(txn Txn) error {
		return txn.Iterate(nsPrefix(nsVec), false, func(_, b []byte) error {
			if name, v, err := decodeVector(b); err == nil && name == e.Name() && len(v) == e.Dim() {
				n++
			}
			return nil
		})
	})
	if err != nil {
		return 0, s.noteDamage(cube, err)
	}
	return n, nil
}

// vectorIndexMaker returns the maker of each cube's VectorIndex, nil
// without an Embedder.
func (s *Store) vectorIndexMaker() func() VectorIndex {
	if s.opts.Embedder == nil {
		return nil
	}
	dim := s.opts.Embedder.Dim()
	if s.opts.NewVectorIndex != nil {
		return func() VectorIndex { return s.opts.NewVectorIndex(dim) }
	}
	return func() VectorIndex { return NewFlatIndex(dim) }
}

// loadVectors reads the stored vectors of cube made by the current
// Embedder into ix; vectors of other embedders are ignored (and replaced
// when their memory is next written). The caller holds ix.mu.
func (s *Store) loadVectors(txn Txn, cube string, ix *cubeIndex) error {
	if ix.vec == nil {
		return nil
	}
	name, dim := s.opts.Embedder.Name(), s.opts.Embedder.Dim()
	pre := nsPrefix(nsVec)
	skipped := 0
	err := txn.Iterate(pre, false, func(k, b []byte) error {
		id := string(k[len(pre):])
		n, ok := ix.byID[id]
		if !ok {
			return nil
		}
		vn, v, err := decodeVector(b)
		if err != nil {
			return fmt.Errorf("%w: vector %s", err, id)
		}
		if vn != name || len(v) != dim {
			skipped++
			return nil
		}
		ix.vec.Add(n, v)
		return nil
	})
	if err != nil {
		return err
	}
	if skipped > 0 {
		s.log.Warn("vectors of another embedder ignored", "cube", cube, "n", skipped, "embedder", name)
	}
	return nil
}

// near is the near-duplicate candidate of an Add.
type near struct {
	ids    []string // best first
	cosine float32  // dense similarity; set when found by vector
	dense  bool
}

// nearCandidate returns the memory most similar to m among those of the
// same Kind and EventTime: by cosine when vec is set, else the best BM25
// match of m's terms. The caller holds ix.writeMu.
func (s *Store) nearCandidate(ix *cubeIndex, m Memory, tf map[string]int, vec []float32) near {
	th := s.opts.NearDuplicate
	if th <= 0 || len(tf) == 0 {
		return near{}
	}
	var event int64
	if !m.EventTime.IsZero() {
		event = m.EventTime.UnixNano()
	}
	keep := func(d *docEntry) bool { return d.meta.kind == m.Kind && d.meta.event == event }
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if vec != nil && ix.vec != nil {
		h := ix.vec.Search(vec, 1, func(n uint32) bool { return ix.docs[n].live && keep(&ix.docs[n]) })
		if len(h) == 0 || float64(h[0].Cosine) < th {
			return near{}
		}
		return near{ids: []string{ix.docs[h[0].Slot].id}, cosine: h[0].Cosine, dense: true}
	}
	// A memory B with Jaccard(A, B) >= th misses at most (1-th)·|A| of A's
	// terms, so it holds one of any floor((1-th)·|A|)+1 of them: query the
	// rarest that many (short posting lists keep Add fast).
	terms := make([]string, 0, len(tf))
	for t := range tf {
		terms = append(terms, t)
	}
	plen := func(t string) int {
		if p := ix.terms[t]; p != nil {
			return len(p.docs)
		}
		return 0
	}
	sort.Slice(terms, func(i, j int) bool {
		if a, b := plen(terms[i]), plen(terms[j]); a != b {
			return a < b
		}
		return terms[i] < terms[j]
	})
	nq := int((1-th)*float64(len(terms))) + 1
	q := make(map[string]float64, nq)
	for _, t := range terms[:min(nq, len(terms))] {
		q[t] = 1
	}
	sc := ix.bm25(q, s.opts.K1, s.opts.B, keep)
	defer ix.putScratch(sc)
	top := ix.topK(sc.touched, func(n uint32) float64 { return sc.acc[n] }, 3)
	return near{ids: ix.idsOf(top)}
}

// nearEnough reports whether old is a near duplicate of a text with terms
// tf: cosine >= NearDuplicate for a dense candidate, else Jaccard
// similarity of the distinct term sets >= NearDuplicate.
func (s *Store) nearEnough(c near, old Memory, tf map[string]int) bool {
	th := s.opts.NearDuplicate
	if c.dense {
		return float64(c.cosine) >= th
	}
	otf, _ := termFreqs(s.opts.Analyzer, old.Text)
	inter := 0
	for t := range tf {
		if _, ok := otf[t]; ok {
			inter++
		}
	}
	union := len(tf) + len(otf) - inter
	return union > 0 && float64(inter)/float64(union) >= th
}
