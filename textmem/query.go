package textmem

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Query is a search request for SearchWith. Every field's zero value turns
// its feature off; DefaultQuery returns the settings measured best on the
// LoCoMo recall benchmark (package bench/recall).
//
// Ranking runs in this order:
//
//  1. Lexical: BM25 (see cubeIndex.bm25) over the query terms, each
//     weighted 1, plus temporal cue terms (TemporalCues) and feedback terms
//     (Feedback), over the memories the filters keep.
//  2. Context: each candidate's score gains ContextWeight times the mean
//     BM25 score of its neighbours. The neighbours of a memory are the
//     memories stored just before and after it (insertion order) with the
//     same non-empty Source, e.g. the adjacent turns of one dialog session;
//     memories without a Source have none.
//  3. Dense (Options.Embedder set and DenseWeight > 0): the cosine nearest
//     memories, and the lexical ranking, are fused by reciprocal rank fusion
//     (Cormack, Clarke and Büttcher, SIGIR 2009): score = Σ w_r / (60 + rank_r),
//     with weight 1 for the lexical list and DenseWeight for the dense one.
//  4. Recency (RecencyWeight > 0): score × (1 + RecencyWeight · 2^(−age/
//     RecencyHalfLife)), age measured from EventTime (Created if zero) to now.
//  5. Neighbours (Neighbors > 0): after the top K are chosen, each hit pulls
//     in up to Neighbors adjacent memories (same Source) on each side with
//     NeighborDecay times its score, and the top K of the union are kept.
//
// Each top K (the one step 5 expands and the final one) is chosen in two
// tiers: first the memories whose Kind is not in LastKinds, by score, then,
// if fewer than K, the others, by score (Query.RanksLast). A memory of a
// LastKinds kind never outranks a hit of another kind, whatever the scores.
type Query struct {
	// Text is the query. A text with no index terms gives no hits.
	Text string
	// K is the number of hits wanted. Default DefaultK.
	K int

	// Kinds keeps memories whose Kind is one of these; empty keeps all.
	Kinds []string
	// Tags keeps memories that carry every one of these tags.
	Tags []string
	// NotKinds drops memories whose Kind is one of these (the OS's memory
	// API leaves recorded chat turns out of a search this way unless asked).
	NotKinds []string
	// NotSources drops memories whose Source is one of these (the OS keeps
	// a cube's short-term chat turns out of prompts this way).
	NotSources []string
	// LastKinds are Kinds ranked after every other hit (the OS ranks its
	// recorded chat turns after the memories a user or an extraction wrote).
	// Within each tier, hits are ordered by Score; across the tiers Score
	// does not compare.
	LastKinds []string
	// Since and Until keep memories whose EventTime (Created when EventTime
	// is zero) is in [Since, Until); a zero bound is open.
	Since, Until time.Time

	// TemporalCues, when > 0, is the weight of the temporal cue terms
	// ("yesterday", "last", "week", month and day names, ...) added to a
	// query that asks when something happened ("when", "what year", "how
	// long ago", ...).
	TemporalCues float64
	// Feedback, when > 0, runs pseudo-relevance feedback (RM3-style,
	// Lavrenko and Croft, SIGIR 2001; Abdul-Jaleel et al., TREC 2004): the
	// FeedbackTerms best terms (by summed normalised tf · idf) of the top
	// Feedback lexical hits are added with weight FeedbackWeight.
	Feedback       int
	FeedbackTerms  int
	FeedbackWeight float64
	// ContextWeight is the neighbour score smoothing weight of step 2.
	ContextWeight float64

	// DenseWeight is the RRF weight of the dense list; 0 or no Embedder
	// turns dense retrieval off.
	DenseWeight float64

	// RecencyWeight and RecencyHalfLife shape the recency boost of step 4.
	// RecencyHalfLife defaults to 30 days when RecencyWeight > 0.
	RecencyWeight   float64
	RecencyHalfLife time.Duration

	// Neighbors and NeighborDecay shape the neighbour expansion of step 5.
	Neighbors     int
	NeighborDecay float64
}

// DefaultQuery returns the query Search runs: neighbour expansion (1 each
// side, decay 0.7), context smoothing 0.5 and temporal cues 0.3, the
// settings measured best without an embedding model on the LoCoMo recall
// benchmark (bench/recall; overall recall@10 76.0 against 51.8 for plain
// BM25 on locomo-dev.json), plus dense fusion at weight 1 when the Store
// has an Embedder.
func DefaultQuery(text string, k int) Query {
	return Query{
		Text:          text,
		K:             k,
		TemporalCues:  0.3,
		ContextWeight: 0.5,
		DenseWeight:   1,
		Neighbors:     1,
		NeighborDecay: 0.7,
	}
}

func (q Query) validate() error {
	var bad []string
	if !utf8.ValidString(q.Text) {
		return ErrInvalidUTF8
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		bad = append(bad, fmt.Sprintf("Since %v not before Until %v", q.Since, q.Until))
	}
	for name, v := range map[string]float64{"TemporalCues": q.TemporalCues, "FeedbackWeight": q.FeedbackWeight,
		"ContextWeight": q.ContextWeight, "DenseWeight": q.DenseWeight, "RecencyWeight": q.RecencyWeight,
		"NeighborDecay": q.NeighborDecay} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			bad = append(bad, fmt.Sprintf("%s is %g, want >= 0", name, v))
		}
	}
	if q.Feedback < 0 || q.FeedbackTerms < 0 || q.Neighbors < 0 || q.RecencyHalfLife < 0 {
		bad = append(bad, "negative count or duration")
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("%w: %s", ErrBadQuery, strings.Join(bad, "; "))
	}
	return nil
}

// Search returns up to k memories of cube that best match query, best
// first; k <= 0 means DefaultK. It runs SearchWith(DefaultQuery(query, k)).
// A query with no index terms (empty, or only stop words) gives no hits and
// no error.
func (s *Store) Search(ctx context.Context, cube, query string, k int) ([]Hit, error) {
	return s.SearchWith(ctx, cube, DefaultQuery(query, k))
}

// keep returns the filter of q, nil when q has none.
func (q Query) keep() func(*docEntry) bool {
	if len(q.Kinds) == 0 && len(q.NotKinds) == 0 && len(q.Tags) == 0 && len(q.NotSources) == 0 && q.Since.IsZero() && q.Until.IsZero() {
		return nil
	}
	since, until := int64(math.MinInt64), int64(math.MaxInt64)
	if !q.Since.IsZero() {
		since = q.Since.UnixNano()
	}
	if !q.Until.IsZero() {
		until = q.Until.UnixNano()
	}
	return func(d *docEntry) bool {
		if len(q.Kinds) > 0 && !slices.Contains(q.Kinds, d.meta.kind) || slices.Contains(q.NotKinds, d.meta.kind) {
			return false
		}
		if slices.Contains(q.NotSources, d.meta.source) {
			return false
		}
		for _, t := range q.Tags {
			if !slices.Contains(d.meta.tags, t) {
				return false
			}
		}
		at := d.meta.event
		if at == 0 {
			at = d.meta.created
		}
		return since <= at && at < until
	}
}

// candidatePool is how many lexical candidates later steps rerank.
func candidatePool(k int) int { return max(4*k, 100) }

// SearchWith runs q over cube and returns up to q.K hits, best first. See
// Query for the ranking steps and the meaning of Score.
func (s *Store) SearchWith(ctx context.Context, cube string, q Query) ([]Hit, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	if q.K <= 0 {
		q.K = DefaultK
	}
	ix, err := s.index(ctx, cube)
	if err != nil {
		return nil, err
	}
	terms := make(map[string]float64)
	s.opts.Analyzer.Terms(q.Text, func(t string) { terms[t] = 1 })
	if len(terms) == 0 {
		return []Hit{}, nil
	}
	if q.TemporalCues > 0 && isTemporalQuestion(q.Text) {
		for _, cue := range temporalCues {
			s.opts.Analyzer.Terms(cue, func(t string) {
				if _, ok := terms[t]; !ok {
					terms[t] = q.TemporalCues
				}
			})
		}
	}
	var qvec []float32
	if q.DenseWeight > 0 && s.opts.Embedder != nil {
		var err error
		if qvec, err = s.embedText(ctx, q.Text); err != nil {
			return nil, err
		}
	}
	keep := q.keep()

	if q.Feedback > 0 && q.FeedbackWeight > 0 {
		ix.mu.RLock()
		sc := ix.bm25(terms, s.opts.K1, s.opts.B, keep)
		top := ix.topK(sc.touched, func(n uint32) float64 { return sc.acc[n] }, q.Feedback)
		ids := ix.idsOf(top)
		ix.putScratch(sc)
		ix.mu.RUnlock()
		if err := s.feedback(ctx, ix, cube, ids, terms, q); err != nil {
			return nil, err
		}
	}

	ix.mu.RLock()
	sc := ix.bm25(terms, s.opts.K1, s.opts.B, keep)
	acc := sc.acc
	pool := ix.topK(sc.touched, func(n uint32) float64 { return acc[n] }, candidatePool(q.K))
	cand := make(map[uint32]float64, len(pool))
	for _, c := range pool {
		cand[c.doc] = c.score
	}
	if q.ContextWeight > 0 {
		for _, c := range pool {
			var sum float64
			var n int
			for _, dir := range []int{-1, 1} {
				if nb, ok := ix.neighbor(c.doc, dir); ok {
					sum += acc[nb]
					n++
				}
			}
			if n > 0 {
				cand[c.doc] = c.score + q.ContextWeight*sum/float64(n)
			}
		}
	}
	ix.putScratch(sc)
	if qvec != nil && ix.vec != nil && ix.vec.Len() > 0 {
		lex := ix.topK(mapKeys(cand), func(n uint32) float64 { return cand[n] }, 0)
		var vkeep func(uint32) bool
		if keep != nil {
			vkeep = func(n uint32) bool { return keep(&ix.docs[n]) }
		}
		dense := ix.vec.Search(qvec, candidatePool(q.K), vkeep)
		fused := make(map[uint32]float64, len(lex)+len(dense))
		for r, c := range lex {
			fused[c.doc] += 1 / (rrfK + float64(r+1))
		}
		for r, c := range dense {
			if ix.docs[c.Slot].live {
				fused[c.Slot] += q.DenseWeight / (rrfK + float64(r+1))
			}
		}
		cand = fused
	}
	if q.RecencyWeight > 0 {
		half := q.RecencyHalfLife
		if half <= 0 {
			half = 30 * 24 * time.Hour
		}
		now := s.opts.Now().UnixNano()
		for n, sc := range cand {
			d := &ix.docs[n]
			at := d.meta.event
			if at == 0 {
				at = d.meta.created
			}
			age := max(float64(now-at), 0) / float64(half)
			cand[n] = sc * (1 + q.RecencyWeight*math.Exp2(-age))
		}
	}
	top := ix.ranked(cand, q)
	if q.Neighbors > 0 && q.NeighborDecay > 0 {
		for _, c := range top {
			for _, dir := range []int{-1, 1} {
				at := c.doc
				for range q.Neighbors {
					nb, ok := ix.neighbor(at, dir)
					if !ok || (keep != nil && !keep(&ix.docs[nb])) {
						break
					}
					if sc := c.score * q.NeighborDecay; sc > cand[nb] {
						cand[nb] = sc
					}
					at = nb
				}
			}
		}
		top = ix.ranked(cand, q)
	}
	ids := ix.idsOf(top)
	ix.mu.RUnlock()
	return s.hits(ctx, cube, ids, top)
}

// RanksLast reports whether a memory of kind ranks in q's second tier:
// after every hit whose Kind is not in q.LastKinds. A caller that reorders
// hits (the OS's session rerank) keeps the tiers with it.
func (q Query) RanksLast(kind string) bool { return slices.Contains(q.LastKinds, kind) }

// ranked returns the top q.K of cand, best first, in q's two tiers (see
// Query): the memories whose Kind is not in q.LastKinds by score, then
// the others by score. The caller holds mu (read).
func (ix *cubeIndex) ranked(cand map[uint32]float64, q Query) []scored {
	score := func(n uint32) float64 { return cand[n] }
	if len(q.LastKinds) == 0 {
		return ix.topK(mapKeys(cand), score, q.K)
	}
	var first, last []uint32
	for n := range cand {
		if q.RanksLast(ix.docs[n].meta.kind) {
			last = append(last, n)
		} else {
			first = append(first, n)
		}
	}
	top := ix.topK(first, score, q.K)
	if len(top) < q.K && len(last) > 0 {
		top = append(top, ix.topK(last, score, q.K-len(top))...)
	}
	return top
}

// rrfK is the rank constant of reciprocal rank fusion (Cormack et al. 2009).
const rrfK = 60

func mapKeys(m map[uint32]float64) []uint32 {
	out := make([]uint32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// idsOf returns the ids of docs; the caller holds mu (read).
func (ix *cubeIndex) idsOf(docs []scored) []string {
	ids := make([]string, len(docs))
	for i, c := range docs {
		ids[i] = ix.docs[c.doc].id
	}
	return ids
}

// feedback adds to terms the q.FeedbackTerms best terms of the memories
// ids: each term of each memory scores (tf / |D|) · idf, summed over the
// memories, and is added with weight q.FeedbackWeight.
func (s *Store) feedback(ctx context.Context, ix *cubeIndex, cube string, ids []string, terms map[string]float64, q Query) error {
	hits, err := s.hits(ctx, cube, ids, make([]scored, len(ids)))
	if err != nil {
		return err
	}
	weight := make(map[string]float64)
	ix.mu.RLock()
	N := float64(ix.live)
	for _, h := range hits {
		tf, dl := termFreqs(s.opts.Analyzer, h.Memory.Text)
		for t, c := range tf {
			if _, ok := terms[t]; ok {
				continue
			}
			p := ix.terms[t]
			if p == nil {
				continue
			}
			nt := float64(len(p.docs))
			weight[t] += float64(c) / float64(dl) * math.Log(1+(N-nt+0.5)/(nt+0.5))
		}
	}
	ix.mu.RUnlock()
	cands := make([]string, 0, len(weight))
	for t := range weight {
		cands = append(cands, t)
	}
	sort.Slice(cands, func(i, j int) bool {
		if weight[cands[i]] != weight[cands[j]] {
			return weight[cands[i]] > weight[cands[j]]
		}
		return cands[i] < cands[j]
	})
	n := q.FeedbackTerms
	if n <= 0 {
		n = 10
	}
	for _, t := range cands[:min(n, len(cands))] {
		terms[t] = q.FeedbackWeight
	}
	return nil
}

// temporalQuestion lists phrases that ask when something happened.
var temporalQuestion = []string{"when ", "what year", "what month", "what date", "what day", "which year",
	"which month", "how long ago", "what time", "how long has", "how long did", "since when"}

func isTemporalQuestion(q string) bool {
	q = " " + strings.ToLower(q)
	for _, p := range temporalQuestion {
		if strings.Contains(q, " "+p) {
			return true
		}
	}
	return false
}

// temporalCues are the words that anchor events in time in conversation.
var temporalCues = []string{
	"yesterday today tonight tomorrow ago last next week weekend month year",
	"recently earlier morning evening night",
	"monday tuesday wednesday thursday friday saturday sunday",
	"january february march april may june july august september october november december",
}
