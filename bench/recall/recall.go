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

	"github.com/memosrt/memosrt/badger"
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
}

// DefaultOptions returns Options with every default filled in (LoCoMo is
// still empty).
func DefaultOptions() Options {
	return Options{K: []int{5, 10, 25}, Logger: slog.New(slog.DiscardHandler)}
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
// with recall in percent. A category without questions is left out.
type Report struct {
	// Recall maps "overall" or a category number ("1".."5") to k ("5") to
	// recall@k in percent.
	Recall Table `json:"recall"`
	// Questions is the number of questions scored: those with at least one
	// valid evidence id.
	Questions int `json:"questions"`
	// SkippedEvidence counts the evidence ids skipped as malformed (not
	// "D<session>:<turn>") or naming no turn of the conversation.
	SkippedEvidence int `json:"skipped_evidence"`

	// Baseline is the same table for plain BM25 (PlainAnalyzer over the
	// turn text and image caption, no query processing), nil with
	// Options.NoBaseline. Not part of the JSON.
	Baseline Table `json:"-"`
	// K is the list of cut-offs, ascending. Not part of the JSON.
	K []int `json:"-"`
	// System names the configuration measured. Not part of the JSON.
	System string `json:"-"`
	// Elapsed is the wall time of Run. Not part of the JSON.
	Elapsed time.Duration `json:"-"`
}

// Table renders the report for people: one row per category and overall,
// one column per k, the system's recall and, when present, the baseline's.
func (r *Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "LoCoMo evidence recall@k (%%), %d questions, %d evidence ids skipped\n", r.Questions, r.SkippedEvidence)
	fmt.Fprintf(&b, "system: %s\n", r.System)
	fmt.Fprintf(&b, "%-16s", "category")
	for _, k := range r.K {
		if r.Baseline != nil {
			fmt.Fprintf(&b, " %15s", fmt.Sprintf("@%d (bm25)", k))
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
			if r.Baseline != nil {
				fmt.Fprintf(&b, " %15s", fmt.Sprintf("%.1f (%.1f)", sys[ks], r.Baseline[row.key][ks]))
			} else {
				fmt.Fprintf(&b, " %7.1f", sys[ks])
			}
		}
		b.WriteByte('\n')
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
	db, err := badger.Open(badger.Options{Dir: dir, NoSync: true})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	store, err := textmem.Open(db, cfg.storeOptions(log))
	if err != nil {
		return nil, err
	}
	defer store.Close()
	res := &results{sum: map[string]map[int]float64{}, n: map[string]int{}}
	maxK := ks[len(ks)-1]
	for _, s := range samples {
		cube := cubeName(s.ID)
		dia, err := cfg.load(ctx, store, cube, s)
		if err != nil {
			return nil, err
		}
		for _, q := range s.QA {
			var want []string
			for _, e := range q.Evidence {
				if !validEvidence(e) || !dia.has(e) {
					res.skipped++
					continue
				}
				if !slices.Contains(want, e) {
					want = append(want, e)
				}
			}
			if len(want) == 0 {
				continue
			}
			ranked, err := cfg.search(ctx, store, cube, q.Question, maxK, s)
			if err != nil {
				return nil, err
			}
			rec := make(map[int]float64, len(ks))
			for _, k := range ks {
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
			res.add(q.Category, ks, rec)
		}
		log.Debug("conversation done", "cube", cube, "turns", len(dia.byID))
	}
	return res, nil
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

// dialog maps memory ids to LoCoMo dia_ids.
type dialog struct {
	byID  map[string]string
	known map[string]bool
}

func (d dialog) has(dia string) bool { return d.known[dia] }
