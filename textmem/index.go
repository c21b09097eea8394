package textmem

import (
	"math"
	"sort"
	"sync"
	"unsafe" // unsafe: Sizeof only, for the index's heap estimate (heapBytes)
)

// cubeIndex is the in-memory image of one cube's persisted index records
// (d/, p/ and s keys): per-memory metadata, BM25 postings and collection
// statistics. It is loaded from the Backend on first use of the cube and then
// kept in step with every committed write of this Store (and reloaded after
// another process's, see Store.changed).
type cubeIndex struct {
	// writeMu serialises the writers of this cube: a writer holds it from
	// before its transaction until the in-memory apply is done, so
	// that commits and applies happen in the same order. Loading also
	// holds it.
	writeMu sync.Mutex

	// mu guards every field below.
	mu       sync.RWMutex
	loaded   bool
	stale    bool                // another process changed the cube since the load (Watcher): reload
	pending  map[string]bool     // ids another process changed since the load: re-read those
	docs     []docEntry          // by doc number; deleted entries have live false
	lens     []uint32            // by doc number: doc length in terms (dense copy of docs[n].meta.length for the scoring loop)
	byID     map[string]uint32   // id -> doc number, live docs only
	terms    map[string]*posting // term -> postings
	live     int                 // number of live docs
	totalLen int64               // sum of live doc lengths, in terms
	vec      VectorIndex         // nil without an Embedder
	scratch  sync.Pool           // of *scratch; not guarded by mu
	newVec   func() VectorIndex  // makes vec; nil without an Embedder
}

type docEntry struct {
	id   string
	meta docMeta
	live bool
}

// posting lists the documents holding one term, with the term frequency of
// each. Order is insertion order (not maintained sorted).
type posting struct {
	docs []uint32
	tfs  []uint16
}

func newCubeIndex(newVec func() VectorIndex) *cubeIndex {
	ix := &cubeIndex{newVec: newVec}
	ix.reset()
	return ix
}

// reset empties the index; the caller holds mu (or owns ix).
func (ix *cubeIndex) reset() {
	ix.docs = nil
	ix.lens = nil
	ix.byID = make(map[string]uint32)
	ix.terms = make(map[string]*posting)
	ix.live = 0
	ix.totalLen = 0
	ix.vec = nil
	if ix.newVec != nil {
		ix.vec = ix.newVec()
	}
}

func (ix *cubeIndex) isLoaded() bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.loaded && !ix.stale && len(ix.pending) == 0
}

// termsOf returns the terms of doc n with their frequencies by scanning
// every posting (O(postings of the cube)): for a doc another process
// changed, whose old text this process never saw. The caller holds mu.
func (ix *cubeIndex) termsOf(n uint32) map[string]int {
	out := map[string]int{}
	for t, p := range ix.terms {
		for i, d := range p.docs {
			if d == n {
				out[t] = int(p.tfs[i])
				break
			}
		}
	}
	return out
}

// addDoc adds a live document; the caller holds mu.
func (ix *cubeIndex) addDoc(id string, meta docMeta) uint32 {
	n := uint32(len(ix.docs))
	ix.docs = append(ix.docs, docEntry{id: id, meta: meta, live: true})
	ix.lens = append(ix.lens, meta.length)
	ix.byID[id] = n
	ix.live++
	ix.totalLen += int64(meta.length)
	return n
}

// addPosting records that doc n holds term tf times; the caller holds mu.
func (ix *cubeIndex) addPosting(term string, n uint32, tf int) {
	p := ix.terms[term]
	if p == nil {
		p = &posting{}
		ix.terms[term] = p
	}
	p.docs = append(p.docs, n)
	p.tfs = append(p.tfs, clampTF(tf))
}

func clampTF(tf int) uint16 {
	if tf > math.MaxUint16 {
		return math.MaxUint16
	}
	return uint16(tf)
}

// removePostings drops doc n from the postings of terms; the caller holds mu.
func (ix *cubeIndex) removePostings(n uint32, terms map[string]int) {
	for t := range terms {
		p := ix.terms[t]
		if p == nil {
			continue
		}
		for i, d := range p.docs {
			if d == n {
				last := len(p.docs) - 1
				copy(p.docs[i:], p.docs[i+1:])
				copy(p.tfs[i:], p.tfs[i+1:])
				p.docs = p.docs[:last]
				p.tfs = p.tfs[:last]
				break
			}
		}
		if len(p.docs) == 0 {
			delete(ix.terms, t)
		}
	}
}

// removeDoc marks doc id deleted and drops its postings; the caller holds mu.
func (ix *cubeIndex) removeDoc(id string, terms map[string]int) {
	n, ok := ix.byID[id]
	if !ok {
		return
	}
	ix.removePostings(n, terms)
	d := &ix.docs[n]
	d.live = false
	ix.live--
	ix.totalLen -= int64(d.meta.length)
	// the slot stays (doc numbers key postings and vectors); its strings go
	d.id, d.meta = "", docMeta{}
	delete(ix.byID, id)
	if ix.vec != nil {
		ix.vec.Remove(n)
	}
}

// replaceDoc swaps the terms and metadata of live doc id; the caller holds
// mu.
func (ix *cubeIndex) replaceDoc(id string, oldTerms, newTerms map[string]int, meta docMeta) {
	n, ok := ix.byID[id]
	if !ok {
		return
	}
	ix.removePostings(n, oldTerms)
	d := &ix.docs[n]
	ix.totalLen += int64(meta.length) - int64(d.meta.length)
	d.meta = meta
	ix.lens[n] = meta.length
	for t, tf := range newTerms {
		ix.addPosting(t, n, tf)
	}
}

// scored is a document number with its score.
type scored struct {
	doc   uint32
	score float64
}

// bm25 scores every live document that holds at least one of the weighted
// query terms and that keep accepts (nil keeps all):
//
//	score(D, Q) = Σ_{t ∈ Q} w_t · idf(t) · tf(t,D)·(k1+1) / (tf(t,D) + k1·(1 − b + b·|D|/avgdl))
//	idf(t)      = ln(1 + (N − n_t + 0.5) / (n_t + 0.5))
//
// as in Robertson and Zaragoza, "The Probabilistic Relevance Framework:
// BM25 and Beyond" (Foundations and Trends in IR 3(4), 2009), eq. 3.15, with
// Lucene's non-negative idf (org.apache.lucene.search.similarities.
// BM25Similarity). N is the number of live documents, n_t the number holding
// t, |D| the document length in terms and avgdl the mean length.
//
// The result is sc.acc, indexed by doc number (zero for unscored docs),
// and sc.touched, the doc numbers scored, in no order; the caller hands sc
// back with ix.putScratch when done. The caller holds mu (read).
func (ix *cubeIndex) bm25(q map[string]float64, k1, b float64, keep func(*docEntry) bool) *scratch {
	sc := ix.getScratch()
	if ix.live == 0 {
		return sc
	}
	acc := sc.acc
	N := float64(ix.live)
	avgdl := float64(ix.totalLen) / N
	if avgdl <= 0 {
		avgdl = 1
	}
	// Iterate terms in a fixed order so that float sums are reproducible.
	terms := make([]string, 0, len(q))
	for t := range q {
		terms = append(terms, t)
	}
	sort.Strings(terms)
	// norm[length] caches k1·(1 − b + b·|D|/avgdl) for short docs.
	var norm [128]float64
	for l := range norm {
		norm[l] = k1 * (1 - b + b*float64(l)/avgdl)
	}
	lens := ix.lens
	for _, t := range terms {
		p := ix.terms[t]
		if p == nil {
			continue
		}
		nt := float64(len(p.docs))
		idf := math.Log(1 + (N-nt+0.5)/(nt+0.5))
		w := q[t] * idf * (k1 + 1)
		for i, n := range p.docs {
			if keep != nil && !keep(&ix.docs[n]) {
				continue
			}
			tf := float64(p.tfs[i])
			var nm float64
			if l := lens[n]; l < uint32(len(norm)) {
				nm = norm[l]
			} else {
				nm = k1 * (1 - b + b*float64(l)/avgdl)
			}
			if acc[n] == 0 {
				sc.touched = append(sc.touched, n)
			}
			acc[n] += w * tf / (tf + nm)
		}
	}
	return sc
}

// scratch is the per-search score accumulator.
type scratch struct {
	acc     []float64 // [len(docs)]; zero outside touched
	touched []uint32
}

// getScratch returns a zeroed accumulator sized for the current docs. The
// caller holds mu (read).
func (ix *cubeIndex) getScratch() *scratch {
	sc, _ := ix.scratch.Get().(*scratch)
	if sc == nil {
		sc = &scratch{}
	}
	if cap(sc.acc) < len(ix.docs) {
		sc.acc = make([]float64, len(ix.docs), len(ix.docs)+len(ix.docs)/4+64)
	} else {
		sc.acc = sc.acc[:len(ix.docs)]
	}
	return sc
}

// putScratch zeroes sc and keeps it for the next search.
func (ix *cubeIndex) putScratch(sc *scratch) {
	for _, n := range sc.touched {
		sc.acc[n] = 0
	}
	sc.touched = sc.touched[:0]
	ix.scratch.Put(sc)
}

// better orders scored docs: higher score first, ties to the smaller
// (older) id. The caller holds mu (read).
func (ix *cubeIndex) better(a, b scored) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return ix.docs[a.doc].id < ix.docs[b.doc].id
}

// topK returns the k best of docs scored by score, best first (k <= 0: all).
// The caller holds mu (read).
func (ix *cubeIndex) topK(docs []uint32, score func(uint32) float64, k int) []scored {
	if k <= 0 || k > len(docs) {
		k = len(docs)
	}
	// A min-heap of the k best so far; h[0] is the worst of them.
	h := make([]scored, 0, k)
	worse := func(i, j int) bool { return ix.better(h[j], h[i]) }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			m := l
			if r := l + 1; r < len(h) && worse(r, l) {
				m = r
			}
			if !worse(m, i) {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for _, n := range docs {
		c := scored{n, score(n)}
		if len(h) == k && c.score < h[0].score {
			continue
		}
		if len(h) < k {
			h = append(h, c)
			for i := len(h) - 1; i > 0; {
				p := (i - 1) / 2
				if !worse(i, p) {
					break
				}
				h[i], h[p] = h[p], h[i]
				i = p
			}
			continue
		}
		if k == 0 || c.score < h[0].score || !ix.better(c, h[0]) {
			continue
		}
		h[0] = c
		down(0)
	}
	sort.Slice(h, func(i, j int) bool { return ix.better(h[i], h[j]) })
	return h
}

// neighbor returns the live doc next to n in insertion order in direction
// dir (-1 or +1) if it shares n's non-empty Source, skipping up to 64
// deleted docs. Memories without a Source have no neighbours. The caller
// holds mu (read).
func (ix *cubeIndex) neighbor(n uint32, dir int) (uint32, bool) {
	src := ix.docs[n].meta.source
	if src == "" {
		return 0, false
	}
	i := int(n)
	for range 64 {
		i += dir
		if i < 0 || i >= len(ix.docs) {
			return 0, false
		}
		d := &ix.docs[i]
		if !d.live {
			continue
		}
		if d.meta.source != src {
			return 0, false
		}
		return uint32(i), true
	}
	return 0, false
}

// Sizes for heapBytes, in bytes. A Go map (Go 1.24's Swiss tables,
// src/internal/runtime/maps/table.go) stores each entry in a slot of its
// key and element with one control byte, in groups of 8 slots, at most 7/8
// full and half that after it doubles: mapSlot is a slot at the midpoint
// load, 3/4 (×4/3).
const (
	stringHeader = int64(unsafe.Sizeof(""))
	docEntrySize = int64(unsafe.Sizeof(docEntry{}))
	postingSize  = int64(unsafe.Sizeof(posting{}))
	mapSlot      = (stringHeader + 8 + 1) * 4 / 3 // string key, 8-byte element (uint32 padded, or a pointer)
)

// heapBytes estimates the heap ix holds, in bytes: its slices at their
// capacity, its maps at mapSlot an entry, the bytes of every string it
// keeps (a memory's id, kind, source and tags; each term; see strBytes) and its
// vectors (when the VectorIndex reports them, see heapSizer). The caller
// holds mu (read) or owns ix; O(docs + terms).
func (ix *cubeIndex) heapBytes() int64 {
	n := int64(cap(ix.docs))*docEntrySize + int64(cap(ix.lens))*4 + int64(len(ix.byID))*mapSlot
	for i := range ix.docs {
		d := &ix.docs[i]
		n += strBytes(d.id) + strBytes(d.meta.kind) + strBytes(d.meta.source) + int64(cap(d.meta.tags))*stringHeader
		for _, t := range d.meta.tags {
			n += strBytes(t)
		}
	}
	for t, p := range ix.terms {
		n += mapSlot + strBytes(t) + postingSize + int64(cap(p.docs))*4 + int64(cap(p.tfs))*2
	}
	if hs, ok := ix.vec.(heapSizer); ok {
		n += hs.HeapBytes()
	}
	return n
}

// strBytes is the heap a string's bytes take: its length rounded up to 8,
// Go's smallest size class (src/runtime/sizeclasses.go).
func strBytes(s string) int64 { return (int64(len(s)) + 7) &^ 7 }

// heapSizer is a VectorIndex that reports the heap it holds, in bytes.
type heapSizer interface{ HeapBytes() int64 }
