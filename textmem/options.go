package textmem

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/memosrt/memosrt/embed"
)

// Options configure a Store. The zero value of each field means its default;
// DefaultOptions returns them all filled in.
type Options struct {
	// Logger receives the Store's logs. Default: discard.
	Logger *slog.Logger

	// Now is the clock for Created and Updated and for time-ordered ids.
	// Default: time.Now.
	Now func() time.Time

	// Analyzer turns texts and queries into index terms.
	// Default: EnglishAnalyzer{}.
	Analyzer Analyzer

	// K1 is the BM25 term-frequency saturation, > 0. Default 1.2 (Lucene's
	// BM25Similarity default).
	K1 float64

	// B is the BM25 document-length normalisation, in (0, 1]. Default 0.75
	// (Lucene's default).
	B float64

	// MaxTextBytes is the longest text Add and Update accept, in bytes.
	// Default 65536.
	MaxTextBytes int

	// Embedder, when set, embeds every added or updated text (in the write
	// path, before the transaction) and turns on dense retrieval in
	// SearchWith. Default nil: lexical retrieval only.
	Embedder embed.Embedder

	// NearDuplicate is the similarity at or above which Add merges a new
	// memory into an existing one of the same Kind and EventTime instead of
	// storing it: cosine of the embeddings with an Embedder, else Jaccard
	// similarity of the distinct index term sets. In (0, 1]; negative turns
	// merging off. Default 0.9.
	NearDuplicate float64

	// NewVectorIndex makes the VectorIndex of each cube for vectors of dim
	// float32s. Default: NewFlatIndex (exact search).
	NewVectorIndex func(dim int) VectorIndex

	// OnDelete, when set, is called after a memory has been deleted (by
	// Delete or DeleteCube) and the deletion committed, so that other tiers
	// can drop what they derived from it. It runs on the deleting
	// goroutine and must not call back into the Store. Default: none.
	OnDelete func(cube, id string)

	// OnCubeDeleted, when set, is called when a Watcher Backend reports
	// that another process deleted cube (this Store's own DeleteCube
	// calls OnDelete per memory instead).
	OnCubeDeleted func(cube string)

	// OnResync, when set, is called when a Watcher Backend reports that
	// changes may have been missed (Change.All, after a lost connection):
	// the Store reloads its indexes; the caller checks what it derived
	// from cubes that may be gone.
	OnResync func()

	// RequireRecord makes every write check, inside its transaction, that
	// the cube has a registry record (Backends implementing
	// RecordChecker), and fail with ErrNoRecord otherwise: with several
	// nodes, a memory added on one while another deletes the cube is then
	// deleted with it or refused, never left in a cube without a record.
	RequireRecord bool
}

// DefaultOptions returns Options with every default filled in.
func DefaultOptions() Options {
	return Options{
		Logger:        slog.New(slog.DiscardHandler),
		Now:           time.Now,
		Analyzer:      EnglishAnalyzer{},
		K1:            1.2,
		B:             0.75,
		MaxTextBytes:  64 << 10,
		NearDuplicate: 0.9,
	}
}

// Validate reports every out-of-range field at once. Zero fields are valid
// (they mean the default).
func (o Options) Validate() error {
	var errs []error
	if o.K1 < 0 {
		errs = append(errs, fmt.Errorf("textmem: K1 is %g, want > 0", o.K1))
	}
	if o.B < 0 || o.B > 1 {
		errs = append(errs, fmt.Errorf("textmem: B is %g, want in (0, 1]", o.B))
	}
	if o.NearDuplicate > 1 {
		errs = append(errs, fmt.Errorf("textmem: NearDuplicate is %g, want <= 1 (negative: off)", o.NearDuplicate))
	}
	if o.MaxTextBytes < 0 {
		errs = append(errs, fmt.Errorf("textmem: MaxTextBytes is %d, want > 0", o.MaxTextBytes))
	}
	return errors.Join(errs...)
}

// withDefaults returns o with zero fields set to their defaults.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Logger == nil {
		o.Logger = d.Logger
	}
	if o.Now == nil {
		o.Now = d.Now
	}
	if o.Analyzer == nil {
		o.Analyzer = d.Analyzer
	}
	if o.K1 == 0 {
		o.K1 = d.K1
	}
	if o.B == 0 {
		o.B = d.B
	}
	if o.MaxTextBytes == 0 {
		o.MaxTextBytes = d.MaxTextBytes
	}
	if o.NearDuplicate == 0 {
		o.NearDuplicate = d.NearDuplicate
	}
	return o
}
