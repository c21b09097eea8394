package conversation

import (
	"cmp"
	"context"
	"slices"

	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/textmem"
)

// sessionWeight and sessionTop shape how sessions rerank a search (see
// fuse).
const (
	sessionWeight = 0.03
	sessionTop    = 3
)

// Visited returns the ids of hits whose retrieval counts towards their
// heat (a visit): every hit but a short-term turn's (Source
// SourceShortTerm), which prompts never hold.
func Visited(hits []textmem.Hit) []string {
	ids := make([]string, 0, len(hits))
	for _, h := range hits {
		if h.Memory.Source != SourceShortTerm {
			ids = append(ids, h.Memory.ID)
		}
	}
	return ids
}

// Search finds cube's memories for q (textmem.Store.SearchWith: BM25 with
// stemming, neighbours, optional dense fusion; the cube's recorded turns
// included, short-term ones too, written first by Materialize), drops
// expired ones (the sweep deletes them at the next tick), reorders the
// hits by the cube's best matching conversation sessions (fuse) and counts
// a visit to each of those sessions (a failure there is logged). Recorded
// turns rank after every other hit (q.LastKinds gains KindTurn): they are
// the conversation's context, and their answers are the model's own text,
// so a memory a user or an extraction wrote comes first whenever it is
// found. At most q.K hits (textmem.DefaultK when 0). Errors: textmem's,
// storage errors.
func (m *Manager) Search(ctx context.Context, cube string, q textmem.Query) ([]textmem.Hit, error) {
	if !q.RanksLast(KindTurn) {
		q.LastKinds = append(slices.Clone(q.LastKinds), KindTurn)
	}
	if err := m.Materialize(ctx, cube); err != nil { // the newest turns, if not written yet
		return nil, err
	}
	ses, err := m.store.SearchSessions(ctx, cube, q.Text, sessionTop)
	if err != nil {
		return nil, err
	}
	k := q.K
	if k == 0 {
		k = textmem.DefaultK
	}
	// the text tier's top 2k, reranked with the sessions (fuse's bonus
	// reaches two or three ranks: the pool only needs to be a little over k)
	q.K = k
	if len(ses) > 0 {
		q.K = 2 * k
	}
	hits, err := m.mem.SearchWith(ctx, cube, q)
	if err != nil {
		return nil, err
	}
	hits = m.liveHits(hits)
	if len(ses) > 0 {
		if hits, err = m.fuse(ctx, cube, q, ses, hits); err != nil {
			return nil, err
		}
		hits = hits[:min(k, len(hits))]
		ids := make([]string, len(ses))
		for i, s := range ses {
			ids[i] = s.Session.ID
		}
		if err := m.store.Visit(ctx, cube, ids); err != nil {
			m.log.Warn("session visits", "cube", cube, "err", err)
		}
	}
	return hits, nil
}

// fuse reranks the hits of a search in cube with the cube's conversation
// memory, as MemoryOS retrieves sessions first and pages within them:
// each hit scores 1/(60+rank) (reciprocal rank fusion, Cormack et al.
// 2009), plus sessionWeight/(60+srank) when its turn lies in one of ses,
// the sessionTop sessions that best match the query (srank their rank).
// The bonus is small on purpose: at most 0.03/60 = 0.0005, what separates
// rank 9 from rank 11 or 12, so a session lifts a hit over a near tie and
// never over a clearly better one (with 0.5 a session's hits displaced the
// text tier's: LoCoMo dev recall@10 68.4 against 76.0 from a 3k pool,
// `make recall-sessions` at 0249fbb). Score is the fused score (one scale
// for all); hits keep their order otherwise, and q's tiers
// (q.RanksLast: a recorded turn never rises over another kind's hit).
func (m *Manager) fuse(ctx context.Context, cube string, q textmem.Query, ses []convmem.SessionHit, hits []textmem.Hit) ([]textmem.Hit, error) {
	srank := map[string]int{}
	for i, s := range ses {
		srank[s.Session.ID] = i
	}
	turnIDs := make([]string, len(hits))
	for i, h := range hits {
		turnIDs[i] = h.Memory.ID
	}
	of, err := m.store.SessionsOf(ctx, cube, turnIDs)
	if err != nil {
		return nil, err
	}
	type scored struct {
		h     textmem.Hit
		score float64
	}
	sc := make([]scored, 0, len(hits))
	for i, h := range hits {
		s := 1 / (60 + float64(i))
		if r, ok := srank[of[h.Memory.ID]]; ok {
			s += sessionWeight / (60 + float64(r))
		}
		sc = append(sc, scored{h, s})
	}
	slices.SortStableFunc(sc, func(a, b scored) int {
		if la, lb := q.RanksLast(a.h.Memory.Kind), q.RanksLast(b.h.Memory.Kind); la != lb {
			if la {
				return 1
			}
			return -1
		}
		return cmp.Compare(b.score, a.score)
	})
	out := make([]textmem.Hit, len(sc))
	for i, x := range sc {
		x.h.Score = x.score
		out[i] = x.h
	}
	return out, nil
}

// liveHits drops hits whose memory has expired (the sweep deletes them at
// the next tick).
func (m *Manager) liveHits(hits []textmem.Hit) []textmem.Hit {
	now := m.now()
	return slices.DeleteFunc(hits, func(h textmem.Hit) bool {
		return !h.Memory.Expires.IsZero() && !h.Memory.Expires.After(now)
	})
}
