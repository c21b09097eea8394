package textmem

import (
	"math"
	"sort"
	"sync"
)

// cubeIndex is the in-memory image of one cube's persisted index records
// (d/, p/ and s keys): per-memory metadata, BM25 postings and collection
// statistics. It is loaded from Badger on first use of the cube and then
// kept in step with every committed write.
type cubeIndex struct {
	// writeMu serialises the writers of this cube: a writer holds it from
	// before its Badger transaction until the in-memory apply is done, so
	// that commits and applies happen in the same order. Loading also
	// holds it.
	writeMu sync.Mutex

	// mu guards every field below.
	mu       sync.RWMutex
	loaded   bool
	docs     []docEntry          // by doc number; deleted entries have live false
	byID     map[string]uint32   // id -> doc number, live docs only
	terms    map[string]*posting // term -> postings
	live     int                 // number of live docs
	totalLen int64               // sum of live doc lengths, in terms
	vecs     map[uint32][]float32
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

func newCubeIndex() *cubeIndex {
	ix := &cubeIndex{}
	ix.reset()
	return ix
}

// reset empties the index; the caller holds mu (or owns ix).
func (ix *cubeIndex) reset() {
	ix.docs = nil
	ix.byID = make(map[string]uint32)
	ix.terms = make(map[string]*posting)
	ix.live = 0
	ix.totalLen = 0
	ix.vecs = make(map[uint32][]float32)
}

func (ix *cubeIndex) isLoaded() bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.loaded
}

// addDoc adds a live document; the caller holds mu.
func (ix *cubeIndex) addDoc(id string, meta docMeta) uint32 {
	n := uint32(len(ix.docs))
	ix.docs = append(ix.docs, docEntry{id: id, meta: meta, live: true})
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
	delete(ix.byID, id)
	delete(ix.vecs, n)
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
// t, |D| the document length in terms and avgdl the mean length. The caller
// holds mu (read).
func (ix *cubeIndex) bm25(q map[string]float64, k1, b float64, keep func(*docEntry) bool) map[uint32]float64 {
	out := make(map[uint32]float64)
	if ix.live == 0 {
		return out
	}
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
	for _, t := range terms {
		p := ix.terms[t]
		if p == nil {
			continue
		}
		nt := float64(len(p.docs))
		idf := math.Log(1 + (N-nt+0.5)/(nt+0.5))
		w := q[t] * idf
		for i, n := range p.docs {
			d := &ix.docs[n]
			if keep != nil && !keep(d) {
				continue
			}
			tf := float64(p.tfs[i])
			norm := k1 * (1 - b + b*float64(d.meta.length)/avgdl)
			out[n] += w * tf * (k1 + 1) / (tf + norm)
		}
	}
	return out
}

// topK returns the k best of scores, best first; ties go to the older
// (smaller) id. The caller holds mu (read).
func (ix *cubeIndex) topK(scores map[uint32]float64, k int) []scored {
	all := make([]scored, 0, len(scores))
	for n, s := range scores {
		all = append(all, scored{n, s})
	}
	less := func(a, b scored) bool {
		if a.score != b.score {
			return a.score > b.score
		}
		return ix.docs[a.doc].id < ix.docs[b.doc].id
	}
	if k <= 0 || k >= len(all) {
		sort.Slice(all, func(i, j int) bool { return less(all[i], all[j]) })
		return all
	}
	// Partial selection with a bounded heap would do less work; at the
	// candidate counts seen (≤ N) a quickselect-free sort of the
	// survivors of a threshold pass is fast enough.
	h := make([]scored, 0, k+1)
	for _, c := range all {
		if len(h) == k && !less(c, h[k-1]) {
			continue
		}
		i := sort.Search(len(h), func(i int) bool { return less(c, h[i]) })
		h = append(h, scored{})
		copy(h[i+1:], h[i:])
		h[i] = c
		if len(h) > k {
			h = h[:k]
		}
	}
	return h
}
