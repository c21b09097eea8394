package recall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/textmem"
)

// Options configure Run. The zero value of each field means its default.
type Options struct {
	// LoCoMo is the path of a LoCoMo file in the official locomo10.json
	// format. Required.
	LoCoMo string
	// K lists the cut-offs k of recall@k, each > 0. Default [5, 10, 25].
	K []int
	// Embedder, when set, gives the system under test dense retrieval fused
	// with BM25. Default: none (lexical only).
	Embedder embed.Embedder
	// Logger receives progress. Default: discard.
	Logger *slog.Logger
	// NoBaseline skips the plain BM25 baseline run. Default false.
	NoBaseline bool

	// Mode is what is measured: ModeFlat ("" too) or ModeSessions.
	Mode string
	// Model is the GGUF file the OS of ModeSessions chats with (its
	// answers are discarded: stories260K.gguf suffices). Required with
	// ModeSessions, unused otherwise.
	Model string
	// Threads are the engine's prefill and decode threads in
	// ModeSessions. Default 2.
	Threads int
	// NCtx is the engine's n_ctx in ModeSessions, tokens. Default 1024.
	NCtx int
	// ShortTermLen is the short-term queue length of ModeSessions' OS
	// (convmem.Options.ShortTermLen). Default 10, convmem's.
	ShortTermLen int
}

// Modes of Run.
const (
	// ModeFlat stores every turn as a memory of a textmem.Store and
	// searches it (Store.SearchWith), next to plain BM25.
	ModeFlat = "flat"
	// ModeSessions feeds every turn, in order, through the chat API of a
	// memosrt.OS (OS.Chat with Record RecordUser: the turn is recorded,
	// the answer discarded), then asks each question with OS.Search
	// (text hits reranked with the cube's sessions), next to ModeFlat's
	// figures on the same data.
	ModeSessions = "sessions"
)

// DefaultOptions returns Options with every default filled in (LoCoMo is
// still empty).
func DefaultOptions() Options {
	return Options{K: []int{5, 10, 25}, Logger: slog.New(slog.DiscardHandler), Mode: ModeFlat,
		Threads: 2, NCtx: 1024, ShortTermLen: 10}
}

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	if o.LoCoMo == "" {
		errs = append(errs, errors.New("recall: Options.LoCoMo is empty"))
	}
	for _, k := range o.K {
		if k <= 0 {
			errs = append(errs, fmt.Errorf("recall: k is %d, want > 0", k))
		}
	}
	switch o.Mode {
	case "", ModeFlat:
	case ModeSessions:
		if o.Model == "" {
			errs = append(errs, errors.New("recall: Options.Model is empty (required with mode sessions)"))
		}
	default:
		errs = append(errs, fmt.Errorf("recall: mode %q, want %q or %q", o.Mode, ModeFlat, ModeSessions))
	}
	if o.Threads < 0 || o.NCtx < 0 || o.ShortTermLen < 0 {
		errs = append(errs, fmt.Errorf("recall: Threads %d, NCtx %d, ShortTermLen %d: want >= 0", o.Threads, o.NCtx, o.ShortTermLen))
	}
	return errors.Join(errs...)
}

// CategoryName names a LoCoMo question category by its number in the data:
// 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial; ""
// for other numbers.
func CategoryName(n int) string {
	switch n {
	case 1:
		return "multi-hop"
	case 2:
		return "temporal"
	case 3:
		return "open-domain"
	case 4:
		return "single-hop"
	case 5:
		return "adversarial"
	}
	return ""
}

// Report is the result of Run. Its JSON is
//
//	{"recall": {"overall": {"5": r, "10": r, "25": r}, "1": {...}, ..., "5": {...}},
//	 "questions": N, "skipped_evidence": M}
//
// with recall in percent; ModeSessions adds "mode", "flat" (a table like
// "recall") and "conversations". A category without questions is left out.
type Report struct {
	// Recall maps "overall" or a category number ("1".."5") to k ("5") to
	// recall@k in percent: of the mode's search (ModeSessions: OS.Search).
	Recall Table `json:"recall"`
	// Questions is the number of questions scored: those with at least one
	// valid evidence id.
	Questions int `json:"questions"`
	// SkippedEvidence counts the evidence ids skipped as malformed (not
	// "D<session>:<turn>") or naming no turn of the conversation.
	SkippedEvidence int `json:"skipped_evidence"`

	// Mode is the mode measured, "" for ModeFlat.
	Mode string `json:"mode,omitempty"`
	// Flat is ModeFlat's table on the same data (ModeSessions only).
	Flat Table `json:"flat,omitempty"`
	// Conversations are what ModeSessions fed and where the turns went,
	// one per conversation.
	Conversations []Conversation `json:"conversations,omitempty"`

	// Baseline is the same table for plain BM25 (PlainAnalyzer over the
	// turn text and image caption, no query processing), nil with
	// Options.NoBaseline and in ModeSessions. Not part of the JSON.
	Baseline Table `json:"-"`
	// K is the list of cut-offs, ascending. Not part of the JSON.
	K []int `json:"-"`
	// System names the configuration measured. Not part of the JSON.
	System string `json:"-"`
	// Elapsed is the wall time of Run. Not part of the JSON.
	Elapsed time.Duration `json:"-"`
}

// Table renders the report for people: one row per category and overall,
// one column per k, the system's recall and, when present, the baseline's
// (ModeSessions: the flat store's), then ModeSessions' conversations.
func (r *Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "LoCoMo evidence recall@k (%%), %d questions, %d evidence ids skipped\n", r.Questions, r.SkippedEvidence)
	fmt.Fprintf(&b, "system: %s\n", r.System)
	other, label := r.Baseline, "bm25"
	if r.Mode == ModeSessions {
		other, label = r.Flat, "flat"
	}
	fmt.Fprintf(&b, "%-16s", "category")
	for _, k := range r.K {
		if other != nil {
			fmt.Fprintf(&b, " %15s", fmt.Sprintf("@%d (%s)", k, label))
		} else {
			fmt.Fprintf(&b, " %7s", fmt.Sprintf("@%d", k))
		}
	}
	b.WriteByte('\n')
	rows := []struct{ key, name string }{}
	for n := 1; n <= 5; n++ {
		rows = append(rows, struct{ key, name string }{strconv.Itoa(n), fmt.Sprintf("%d %s", n, CategoryName(n))})
	}
	rows = append(rows, struct{ key, name string }{"overall", "overall"})
	for _, row := range rows {
		sys, ok := r.Recall[row.key]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "%-16s", row.name)
		for _, k := range r.K {
			ks := strconv.Itoa(k)
			if other != nil {
				fmt.Fprintf(&b, " %15s", fmt.Sprintf("%.1f (%.1f)", sys[ks], other[row.key][ks]))
			} else {
				fmt.Fprintf(&b, " %7.1f", sys[ks])
			}
		}
		b.WriteByte('\n')
	}
	if len(r.Conversations) > 0 {
		fmt.Fprintf(&b, "%-12s %6s %10s %14s %8s %11s %9s %8s\n", "conversation", "turns", "short-term", "max short-term", "sessions", "in sessions", "misplaced", "seconds")
		for _, c := range r.Conversations {
			fmt.Fprintf(&b, "%-12s %6d %10d %14d %8d %11d %9d %8.1f\n", c.Cube, c.Turns, c.ShortTerm, c.MaxShortTerm,
				c.Sessions, c.InSessions, c.Misplaced(), c.Elapsed.Seconds())
		}
	}
	return b.String()
}

// Table maps "overall" or a category number ("1".."5") to k ("10") to
// recall@k in percent, rounded to 0.01.
type Table map[string]map[string]float64

// MarshalJSON writes "overall" first, then the categories, each row's k in
// ascending order, e.g. {"overall":{"5":50,"10":75},"1":{...}}.
func (t Table) MarshalJSON() ([]byte, error) {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	numFirst := func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == "overall":
			return -1
		case b == "overall":
			return 1
		}
		x, errx := strconv.Atoi(a)
		y, erry := strconv.Atoi(b)
		if errx == nil && erry == nil {
			return x - y
		}
		return strings.Compare(a, b)
	}
	slices.SortFunc(keys, numFirst)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteString(":{")
		ks := make([]string, 0, len(t[k]))
		for kk := range t[k] {
			ks = append(ks, kk)
		}
		slices.SortFunc(ks, numFirst)
		for j, kk := range ks {
			if j > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(kk)
			vb, err := json.Marshal(t[k][kk])
			if err != nil {
				return nil, err
			}
			b.Write(kb)
			b.WriteByte(':')
			b.Write(vb)
		}
		b.WriteByte('}')
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Run loads opts.LoCoMo, stores every dialog turn of each conversation as a
// memory in a cube of its own (in a Badger database in a temporary
// directory, removed afterwards), asks every
// question and measures evidence recall@k.
//
// recall@k of one question is the fraction of its evidence turns that are
// among the first k hits; the reported recall@k is that fraction averaged
// over the questions of a category (or all questions), in percent.
// Evidence ids that are malformed or name no turn are skipped and counted;
// a question left with no evidence is not scored.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	d := DefaultOptions()
	if len(opts.K) == 0 {
		opts.K = d.K
	}
	if opts.Logger == nil {
		opts.Logger = d.Logger
	}
	ks := slices.Clone(opts.K)
	slices.Sort(ks)
	ks = slices.Compact(ks)
	start := time.Now()

	samples, err := loadLoCoMo(opts.LoCoMo)
	if err != nil {
		return nil, err
	}
	sys := systemConfig(opts.Embedder)
	rep := &Report{K: ks, System: sys.describe()}
	res, err := measure(ctx, samples, sys, ks, opts.Logger)
	if err != nil {
		return nil, err
	}
	rep.Recall, rep.Questions, rep.SkippedEvidence = res.table(ks), res.questions, res.skipped
	if opts.Mode == ModeSessions {
		if opts.Threads == 0 {
			opts.Threads = d.Threads
		}
		if opts.NCtx == 0 {
			opts.NCtx = d.NCtx
		}
		if opts.ShortTermLen == 0 {
			opts.ShortTermLen = d.ShortTermLen
		}
		ses, convs, err := measureSessions(ctx, samples, sys, ks, opts)
		if err != nil {
			return nil, err
		}
		rep.Mode, rep.Flat, rep.Conversations = ModeSessions, rep.Recall, convs
		rep.Recall, rep.Questions, rep.SkippedEvidence = ses.table(ks), ses.questions, ses.skipped
		rep.System = "memosrt.OS: chat turns recorded (RecordUser), OS.Search (text hits reranked with the cube's sessions); flat: " + rep.System
		rep.Elapsed = time.Since(start)
		opts.Logger.Info("recall done", "mode", ModeSessions, "questions", rep.Questions, "elapsed_ms", rep.Elapsed.Milliseconds())
		return rep, nil
	}
	if !opts.NoBaseline {
		base, err := measure(ctx, samples, baselineConfig(), ks, opts.Logger)
		if err != nil {
			return nil, err
		}
		rep.Baseline = base.table(ks)
	}
	rep.Elapsed = time.Since(start)
	opts.Logger.Info("recall done", "questions", rep.Questions, "elapsed_ms", rep.Elapsed.Milliseconds())
	return rep, nil
}

func newResults() *results {
	return &results{sum: map[string]map[int]float64{}, n: map[string]int{}}
}

// results accumulates per-question recall.
type results struct {
	sum       map[string]map[int]float64 // category key -> k -> Σ recall
	n         map[string]int             // category key -> questions
	questions int
	skipped   int
}

func (r *results) add(cat int, ks []int, rec map[int]float64) {
	for _, key := range []string{"overall", strconv.Itoa(cat)} {
		if r.sum[key] == nil {
			r.sum[key] = make(map[int]float64)
		}
		for _, k := range ks {
			r.sum[key][k] += rec[k]
		}
		r.n[key]++
	}
	r.questions++
}

func (r *results) table(ks []int) Table {
	out := make(Table)
	for key, sums := range r.sum {
		row := make(map[string]float64)
		for _, k := range ks {
			row[strconv.Itoa(k)] = round2(100 * sums[k] / float64(r.n[key]))
		}
		out[key] = row
	}
	return out
}

func round2(x float64) float64 {
	return float64(int64(x*100+0.5)) / 100
}

// measure runs one configuration over all samples.
func measure(ctx context.Context, samples []sample, cfg config, ks []int, log *slog.Logger) (*results, error) {
	// On disk, not InMemory: Badger's in-memory mode refuses values over
	// its 1 KiB value threshold, which embedding vectors exceed.
	dir, err := os.MkdirTemp("", "memosrt-recall-*")
	if err != nil {
		return nil, fmt.Errorf("recall: %w", err)
	}
	defer os.RemoveAll(dir)
	db, err := datadir.Open(datadir.Options{Dir: dir, NoSync: true})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	store, err := textmem.Open(db, cfg.storeOptions(log))
	if err != nil {
		return nil, err
	}
	defer store.Close()
	res := newResults()
	maxK := ks[len(ks)-1]
	for _, s := range samples {
		cube := cubeName(s.ID)
		dia, err := cfg.load(ctx, store, cube, s)
		if err != nil {
			return nil, err
		}
		// One search of the largest k; the first k of its hits are the
		// hits of a search of k (textmem's candidate pool, max(4k, 100),
		// is the same for every k <= 25, and a neighbour pulled in scores
		// below the hit that pulled it).
		err = res.score(s, dia, ks, func(question string) (func(k int) ([]string, error), error) {
			ranked, err := cfg.search(ctx, store, cube, question, maxK, s)
			return func(k int) ([]string, error) { return ranked[:min(k, len(ranked))], nil }, err
		})
		if err != nil {
			return nil, err
		}
		log.Debug("conversation done", "cube", cube, "turns", len(dia.byID))
	}
	return res, nil
}

// score adds the recall@k of every question of s to r: search(question)
// returns the function that gives the ids of the first k hits for it.
func (r *results) score(s sample, dia dialog, ks []int, search func(question string) (func(k int) ([]string, error), error)) error {
	for _, q := range s.QA {
		var want []string
		for _, e := range q.Evidence {
			if !validEvidence(e) || !dia.has(e) {
				r.skipped++
				continue
			}
			if !slices.Contains(want, e) {
				want = append(want, e)
			}
		}
		if len(want) == 0 {
			continue
		}
		top, err := search(q.Question)
		if err != nil {
			return err
		}
		rec := make(map[int]float64, len(ks))
		for _, k := range ks {
			ranked, err := top(k)
			if err != nil {
				return err
			}
			found := 0
			for _, w := range want {
				for i := 0; i < k && i < len(ranked); i++ {
					if dia.byID[ranked[i]] == w {
						found++
						break
					}
				}
			}
			rec[k] = float64(found) / float64(len(want))
		}
		r.add(q.Category, ks, rec)
	}
	return nil
}

// cubeName maps a sample id to a valid cube name.
func cubeName(id string) string {
	b := []byte(id)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	if len(b) == 0 {
		return "conv"
	}
	return string(b)
}

// dialog maps the keys of hits (memory ids; in ModeSessions, event times)
// to LoCoMo dia_ids.
type dialog struct {
	byID  map[string]string
	known map[string]bool
}

func (d dialog) has(dia string) bool { return d.known[dia] }
