package recall

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/textmem"
)

// config is one retrieval configuration under test.
type config struct {
	name     string
	analyzer textmem.Analyzer
	speaker  bool // index "Speaker: text"
	date     bool // index the session date words
	embedder embed.Embedder
	k1, b    float64
	query    textmem.Query // template; Text and K are set per question
}

func (c config) describe() string {
	q := c.query
	return fmt.Sprintf("%s: %s analyzer, speaker+date in text, neighbours %d (decay %.2g), context %.2g, temporal cues %.2g, dense weight %.2g",
		c.name, c.analyzer.Name(), q.Neighbors, q.NeighborDecay, q.ContextWeight, q.TemporalCues, q.DenseWeight)
}

func (c config) storeOptions(log *slog.Logger) textmem.Options {
	return textmem.Options{Logger: log, Analyzer: c.analyzer, Embedder: c.embedder, K1: c.k1, B: c.b,
		NearDuplicate: -1} // every turn is its own memory
}

// baselineConfig is plain BM25 over the same indexed turns as the system
// (speaker, text, image caption, session date): PlainAnalyzer (no stemming,
// no stop words), Lucene's k1 and b, the question as the query.
func baselineConfig() config {
	return config{
		name:     "bm25 plain",
		analyzer: textmem.PlainAnalyzer{},
		speaker:  true,
		date:     true,
	}
}

// systemConfig is the retrieval pipeline measured.
func systemConfig(e embed.Embedder) config {
	c := config{
		name:     "textmem",
		analyzer: textmem.EnglishAnalyzer{},
		speaker:  true,
		date:     true,
		embedder: e,
		query:    textmem.DefaultQuery("", 0),
	}
	if e != nil {
		c.name += " + " + e.Name()
	}
	return c
}

// turnText is the text c indexes for turn t of ses: "<session date>
// <speaker>: <text> [image: <caption>]", the date and speaker as c asks.
func (c config) turnText(ses session, t turn) string {
	text := t.Text
	if t.Caption != "" {
		text += " [image: " + t.Caption + "]"
	}
	if c.speaker {
		text = t.Speaker + ": " + text
	}
	if c.date && !ses.Date.IsZero() {
		text = ses.Date.Format("2 January 2006") + " " + text
	}
	return text
}

// load stores every turn of s in cube.
func (c config) load(ctx context.Context, st *textmem.Store, cube string, s sample) (dialog, error) {
	d := dialog{byID: map[string]string{}, known: map[string]bool{}}
	for _, ses := range s.Sessions {
		for _, t := range ses.Turns {
			m, err := st.Add(ctx, cube, textmem.Memory{
				Text:      c.turnText(ses, t),
				Kind:      "dialog",
				Source:    fmt.Sprintf("%s/session_%d", s.ID, ses.N),
				Tags:      []string{t.DiaID},
				EventTime: ses.Date,
			})
			if err != nil {
				return d, fmt.Errorf("recall: %s %s: %w", s.ID, t.DiaID, err)
			}
			if _, dup := d.byID[m.ID]; !dup {
				// An exact duplicate turn keeps the first dia_id.
				d.byID[m.ID] = t.DiaID
			}
			d.known[t.DiaID] = true
		}
	}
	return d, nil
}

// search returns the ids of the best k memories for question.
func (c config) search(ctx context.Context, st *textmem.Store, cube, question string, k int, s sample) ([]string, error) {
	q := c.query
	q.Text, q.K = question, k
	hits, err := st.SearchWith(ctx, cube, q)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.Memory.ID
	}
	return ids, nil
}
