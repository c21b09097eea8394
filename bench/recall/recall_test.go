package recall

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"testing"

	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/internal/testmodels"
)

func TestRunMini(t *testing.T) {
	rep, err := Run(context.Background(), Options{LoCoMo: "testdata/mini.json", K: []int{2, 1, 5}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	// 4 questions scored (the adversarial one has no valid evidence), 3
	// evidence ids skipped ("D9:9", "D1", "D2:1; D2:2").
	want := `{"recall":{"overall":{"1":87.5,"2":100,"5":100},"1":{"1":50,"2":100,"5":100},"2":{"1":100,"2":100,"5":100},"4":{"1":100,"2":100,"5":100}},"questions":4,"skipped_evidence":3}`
	if string(b) != want {
		t.Errorf("json\n got %s\nwant %s", b, want)
	}
	// Plain BM25 has no stemming ("paint" misses "painted", "camp" misses
	// "camping") and ranks "That is wonderful news" first for the multi-hop
	// question (on "is"); the speaker names in the text bring the rest in by 5.
	wantBase := Table{"overall": {"1": 50, "2": 62.5, "5": 100}, "1": {"1": 0, "2": 50, "5": 100},
		"2": {"1": 100, "2": 100, "5": 100}, "4": {"1": 50, "2": 50, "5": 100}}
	gb, _ := json.Marshal(rep.Baseline)
	wb, _ := json.Marshal(wantBase)
	if string(gb) != string(wb) {
		t.Errorf("baseline\n got %s\nwant %s", gb, wb)
	}
	t.Logf("\n%s", rep.Table())
}

func TestOptionsValidate(t *testing.T) {
	err := Options{K: []int{5, 0}}.Validate()
	want := "recall: Options.LoCoMo is empty\nrecall: k is 0, want > 0"
	if err == nil || err.Error() != want {
		t.Errorf("got %v", err)
	}
	_, err = Run(context.Background(), Options{LoCoMo: "recall_test.go"})
	if !errors.Is(err, ErrBadLoCoMo) {
		t.Errorf("not json: %v", err)
	}
}

func TestParseSessionDate(t *testing.T) {
	for in, want := range map[string]string{
		"1:56 pm on 8 May, 2023":    "2023-05-08T13:56:00Z",
		"10:04 am on 25 Jan, 2024":  "2024-01-25T10:04:00Z",
		"12:00 am on 1 March, 2022": "2022-03-01T00:00:00Z",
	} {
		got, err := parseSessionDate(in)
		if err != nil || got.Format("2006-01-02T15:04:05Z07:00") != want {
			t.Errorf("parseSessionDate(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	if _, err := parseSessionDate("yesterday"); err == nil {
		t.Error("bad date parsed")
	}
}

// TestLoCoMoDev runs the benchmark on the file named by MEMOSRT_LOCOMO
// (e.g. /work/shared/data/locomo-dev.json); skipped when unset.
func TestLoCoMoDev(t *testing.T) {
	path := os.Getenv("MEMOSRT_LOCOMO")
	if path == "" {
		t.Skip("MEMOSRT_LOCOMO not set")
	}
	rep, err := Run(context.Background(), Options{LoCoMo: path})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rep)
	t.Logf("\n%s\n%s\nelapsed %v", rep.Table(), b, rep.Elapsed)
	// Issue 5's bar: overall recall@10 >= 67.5 without an embedding model,
	// and plain BM25 beaten in every category.
	if r := rep.Recall["overall"]["10"]; r < 67.5 {
		t.Errorf("overall recall@10 %.2f < 67.5", r)
	}
	for cat, row := range rep.Recall {
		for k, r := range row {
			if r <= rep.Baseline[cat][k] {
				t.Errorf("category %s recall@%s %.2f does not beat bm25 %.2f", cat, k, r, rep.Baseline[cat][k])
			}
		}
	}
}

// TestLoCoMoDevHash is the dense path's regression check on MEMOSRT_LOCOMO:
// the hash embedder (768 signed buckets of words and character trigrams,
// no model) fused with the default lexical ranking by reciprocal rank
// fusion at weight 1. It scored 60.1 overall recall@10, below the lexical
// ranking alone (76.0): hashed trigrams are no semantic signal, and
// fusing them demotes exact lexical hits. A change to fusion, the vector
// index or the hash embedder that moves the figure shows here.
func TestLoCoMoDevHash(t *testing.T) {
	path := os.Getenv("MEMOSRT_LOCOMO")
	if path == "" {
		t.Skip("MEMOSRT_LOCOMO not set")
	}
	h, err := embed.NewHash(768)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), Options{LoCoMo: path, Embedder: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep.Table())
	if r := rep.Recall["overall"]["10"]; math.Abs(r-60.1) > 0.5 {
		t.Errorf("overall recall@10 with the hash embedder %.2f, measured 60.1", r)
	}
}

// checkPlacement fails t unless every conversation of rep kept its
// short-term queue within its bound and placed every fed turn exactly once.
func checkPlacement(t *testing.T, rep *Report) {
	t.Helper()
	if len(rep.Conversations) == 0 {
		t.Fatal("no conversations reported")
	}
	for _, c := range rep.Conversations {
		if !c.OK() {
			t.Errorf("%s: %+v: want short-term <= %d, no turn misplaced, short-term + in sessions = turns", c.Cube, c, c.ShortTermLen)
		}
	}
}

func TestRunMiniSessions(t *testing.T) {
	rep, err := Run(context.Background(), Options{LoCoMo: "testdata/mini.json", K: []int{1, 2, 5},
		Mode: ModeSessions, Model: testmodels.Stories(t), ShortTermLen: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep.Table())
	checkPlacement(t, rep)
	if rep.Questions != 4 || rep.Flat == nil || rep.Mode != ModeSessions {
		t.Errorf("questions %d, flat %v, mode %q", rep.Questions, rep.Flat, rep.Mode)
	}
}

// TestLoCoMoDevSessions is issue 17's bar on MEMOSRT_LOCOMO: the
// conversations fed turn by turn through the chat API (answers discarded,
// turns recorded) end with bounded short-term queues, every turn in the
// queue or one session, and evidence recall@10 of OS.Search (sessions +
// memories) at least the flat store's. Skipped unless MEMOSRT_LOCOMO and
// MEMOSRT_LOCOMO_SESSIONS are set (`make recall-sessions`): it feeds the
// 4,124 dev turns through the engine, about 7 minutes on 2 cores.
func TestLoCoMoDevSessions(t *testing.T) {
	path := os.Getenv("MEMOSRT_LOCOMO")
	if path == "" || os.Getenv("MEMOSRT_LOCOMO_SESSIONS") == "" {
		t.Skip("MEMOSRT_LOCOMO or MEMOSRT_LOCOMO_SESSIONS not set")
	}
	rep, err := Run(context.Background(), Options{LoCoMo: path, Mode: ModeSessions, Model: testmodels.Stories(t)})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rep)
	t.Logf("\n%s\n%s\nelapsed %v", rep.Table(), b, rep.Elapsed)
	checkPlacement(t, rep)
	if s, f := rep.Recall["overall"]["10"], rep.Flat["overall"]["10"]; s < f {
		t.Errorf("overall recall@10: sessions %.2f < flat %.2f", s, f)
	}
}
