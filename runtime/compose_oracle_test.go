package runtime

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
)

// klRows is the summed KL(p‖q) over rows of log-probabilities.
func klRows(p, q [][]float64) float64 {
	var d float64
	for i := range p {
		for k, lp := range p[i] {
			d += math.Exp(lp) * (lp - q[i][k])
		}
	}
	return d
}

// outcomeOracle chooses, for one ordered pair, up to budget moved positions
// to recompute by greedy forward selection on the outcome itself: each
// step adds the position whose recompute (with those chosen before) most
// lowers the summed KL between the full prefill's next-token distributions
// and the composed one's over the query and the teacher-forced
// continuation. It knows the answer, so it bounds what a selection rule
// can reach at that budget (up to greedy selection's own shortfall).
func (f *composeFixture) outcomeOracle(t testing.TB, order []int, budget int, forced []Token, want [][]float64) []int {
	e, ctx := f.e, context.Background()
	var chunks []Chunk
	for _, i := range order {
		chunks = append(chunks, f.chunks[i])
	}
	try := func(redo []int) float64 {
		res, err := e.ComposeSeq(ctx, 1, []int{2}, f.pre, chunks, ComposeOptions{Ratio: -1})
		if err != nil {
			t.Fatal(err)
		}
		e.mu.Lock()
		_, err = e.recomputeLocked(ctx, 1, []int{2}, res.Tokens, redo)
		e.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		got := logprobsAt(t, e, 1, forced, len(res.Tokens))
		e.ClearSeq(1)
		d := klRows(want, got)
		if f.outcomeGreedy {
			// lexicographic: the greedy prefix first (rows from the
			// query's last on predict the continuation), then KL
			q := len(forced) - len(want) + len(f.query) - 1
			for i := q; i < len(want) && argmax(got[i]) == argmax(want[i]); i++ {
				d -= 1e6
			}
		}
		return d
	}
	var cand []int
	pos := len(f.pre.Tokens)
	for ci, c := range chunks {
		if ci > 0 || c.Pos0 != pos {
			for k := range c.Tokens {
				cand = append(cand, pos+k)
			}
		}
		pos += len(c.Tokens)
	}
	var chosen []int
	for range budget {
		best, bestKL := -1, math.Inf(1)
		for _, p := range cand {
			if slices.Contains(chosen, p) {
				continue
			}
			redo := append(slices.Clone(chosen), p)
			slices.Sort(redo)
			if d := try(redo); d < bestKL {
				best, bestKL = p, d
			}
		}
		if best < 0 {
			break
		}
		chosen = append(chosen, best)
		slices.Sort(chosen)
	}
	return chosen
}

// TestComposeOutcomeOracle is an experiment (MEMOSRT_COMPOSE_ORACLE=1): how
// far selection by outcome gets on BenchmarkComposeQuality's 30 pairs at
// 4-8 recomputed tokens, against the 15% target.
func TestComposeOutcomeOracle(t *testing.T) {
	if os.Getenv("MEMOSRT_COMPOSE_ORACLE") == "" {
		t.Skip("experiment: set MEMOSRT_COMPOSE_ORACLE=1")
	}
	e, err := Load(context.Background(), Options{ModelPath: testmodels.Stories(t), Threads: 1, NCtx: 512, NSeqMax: 3, BlendProbe: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	f := newComposeFixture(t, e, false)
	for _, r := range []struct {
		budget int
		greedy bool
	}{{4, false}, {6, false}, {8, false}, {6, true}, {8, true}} {
		budget := r.budget
		g := *f
		g.outcome, g.outcomeGreedy = budget, r.greedy
		s := g.pairs(t, ComposeOptions{}, 24)
		fmt.Printf("outcome oracle %d tokens (greedy first: %v): top1 %.1f%% greedy %.1f%% prefix %.1f%% recomputed %.1f%%\n",
			budget, r.greedy, 100*s.top1, 100*s.greedy, 100*s.prefix, 100*s.recomputed)
	}
}
