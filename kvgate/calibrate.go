package kvgate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
)

// Codec settings of the store (serve --kv-codec).
const (
	CodecExact = "exact" // packs byte-identical to the live KV (the default)
	CodecAuto  = "auto"  // the smallest lossy codec the gate passes, else exact
	CodecQ8    = "q8"    // 8-bit KIVI-style quantization, if the gate passes it
	CodecQ4    = "q4"    // 4-bit, if the gate passes it
)

// Params returns the quantization of a lossy codec name (q8, q4), ok
// false for exact and anything else.
func Params(codec string) (kvcache.LossyParams, bool) {
	switch codec {
	case CodecQ8:
		return kvcache.LossyParams{Bits: 8, KeyGroup: 128, ValGroup: 64}, true
	case CodecQ4:
		return kvcache.DefaultLossy, true
	}
	return kvcache.LossyParams{}, false
}

// lossyCodecs are the lossy codecs calibrated, smallest first: "auto"
// takes the first that passes.
var lossyCodecs = []string{CodecQ4, CodecQ8}

// Fractions are the recompute fractions composition is calibrated at,
// ascending; 0 is shift only (nothing recomputed).
var Fractions = []float64{0, 0.05, 0.10, 0.15, 0.25, 0.40}

// Targets are what a setting must reach to pass. Zero fields mean the
// default given.
type Targets struct {
	// Top1 is the least share of positions whose next token (argmax)
	// equals the full prefill's, over the query and the teacher-forced
	// continuation. Default 0.99.
	Top1 float64 `json:"top1"`
	// Greedy is the least share of samples whose greedy path equals the
	// full prefill's in every token. Default 0.90.
	Greedy float64 `json:"greedy"`
	// Ceiling is the largest recompute fraction composition may need;
	// fractions above it are not tried. Default 0.40.
	Ceiling float64 `json:"ceiling"`
}

// WithDefaults fills zero fields.
func (t Targets) WithDefaults() Targets {
	if t.Top1 == 0 {
		t.Top1 = 0.99
	}
	if t.Greedy == 0 {
		t.Greedy = 0.90
	}
	if t.Ceiling == 0 {
		t.Ceiling = 0.40
	}
	return t
}

// Validate reports targets outside (0, 1].
func (t Targets) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{{"top1", t.Top1}, {"greedy", t.Greedy}, {"ceiling", t.Ceiling}} {
		if f.v < 0 || f.v > 1 {
			errs = append(errs, fmt.Errorf("%w: target %s %g, want a share in (0, 1]", ErrBadOptions, f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// Samples shape the calibration text. Zero fields mean the default given.
type Samples struct {
	// N is the number of samples (and of seed prompts used, cycled past
	// the 12 there are). Default 12.
	N int `json:"n"`
	// Chunks is the chunks (memories) each sample composes. Default 2.
	Chunks int `json:"chunks"`
	// ChunkTokens is the greedy text generated per seed prompt: a chunk.
	// Default 20.
	ChunkTokens int `json:"chunk_tokens"`
	// QueryTokens is the query after the chunks, the start of another
	// seed's text. Default 8.
	QueryTokens int `json:"query_tokens"`
	// Greedy is the greedy path compared, in tokens. Default 24.
	Greedy int `json:"greedy"`
}

// WithDefaults fills zero fields.
func (s Samples) WithDefaults() Samples {
	if s.N == 0 {
		s.N = 12
	}
	if s.Chunks == 0 {
		s.Chunks = 2
	}
	if s.ChunkTokens == 0 {
		s.ChunkTokens = 20
	}
	if s.QueryTokens == 0 {
		s.QueryTokens = 8
	}
	if s.Greedy == 0 {
		s.Greedy = 24
	}
	return s
}

// Validate reports sizes that cannot make a sample.
func (s Samples) Validate() error {
	if s.N < 1 || s.Chunks < 1 || s.ChunkTokens < 2 || s.QueryTokens < 1 || s.Greedy < 1 {
		return fmt.Errorf("%w: samples %+v", ErrBadOptions, s)
	}
	return nil
}

// seeds start the model's own text: each is generated from greedily.
var seeds = []string{
	" Once upon a time", " One day", " Lily", " Tom", " The little", " A big", " The sun", " Ben and",
	" There was a", " Sue", " The old", " Max",
}

// Options choose what Calibrate measures.
type Options struct {
	Samples Samples
	Targets Targets
	// Compose calibrates the recompute fraction of composition.
	Compose bool
	// Codecs calibrates the lossy codecs of the store.
	Codecs bool
}

// Row is one setting's measurement.
type Row struct {
	// Setting names it: "compose 0.15", "exact", "q8", "q4".
	Setting string `json:"setting"`
	// Fraction is the recompute fraction asked for (composition rows).
	Fraction float64 `json:"fraction,omitempty"`
	// Recomputed is the share of chunk tokens in fact decoded again
	// (composition rows).
	Recomputed float64 `json:"recomputed,omitempty"`
	// Top1 is the share of positions whose argmax equals the reference's.
	Top1 float64 `json:"top1"`
	// Greedy is the share of samples whose greedy path equals the
	// reference's.
	Greedy float64 `json:"greedy"`
	// Ratio is state bytes / blob bytes of the samples' packs under this
	// codec (codec rows).
	Ratio float64 `json:"ratio,omitempty"`
	// Pass: both targets met.
	Pass bool `json:"pass"`
	// Err says why the setting could not be measured ("" when it was).
	Err string `json:"err,omitempty"`
}

// Decision is a calibration's whole table and its choices.
type Decision struct {
	Key       string    `json:"key"`
	Targets   Targets   `json:"targets"`
	Samples   Samples   `json:"samples"`
	Compose   []Row     `json:"compose,omitempty"` // one per fraction tried, ascending
	Codecs    []Row     `json:"codecs,omitempty"`  // exact, then the lossy codecs
	Composed  bool      `json:"composed"`          // composition calibrated (Options.Compose)
	ComposeOn bool      `json:"compose_on"`        // a fraction passed
	Ratio     float64   `json:"ratio"`             // the smallest passing fraction (ComposeOn)
	Codec     string    `json:"codec"`             // "auto"'s choice: the smallest passing codec, else exact ("" when not calibrated)
	Took      float64   `json:"took_s"`            // seconds the calibration ran
	At        time.Time `json:"at"`
}

// Passes reports whether the codec row of codec passed (exact always does).
func (d Decision) Passes(codec string) bool {
	if codec == CodecExact {
		return true
	}
	for _, r := range d.Codecs {
		if r.Setting == codec {
			return r.Pass
		}
	}
	return false
}

// sample is one calibration case: the chunks composed (indices into the
// memories) and the query after them.
type sample struct {
	chunks []int
	query  []runtime.Token
}

// reference is a sample's full prefill: the tokens before the query (n),
// the forced rows' argmax, the greedy path and the exact state of the
// first n tokens.
type reference struct {
	full   []runtime.Token
	n      int
	forced []runtime.Token
	want   []runtime.Token
	greedy []runtime.Token
	state  []byte
}

// tally sums agreement over samples.
type tally struct {
	agree, positions, same, cases, redo, chunkToks int
	stateBytes, blobBytes                          int64
}

func (t *tally) add(ref reference, got, gen []runtime.Token) {
	for i := range ref.want {
		if got[i] == ref.want[i] {
			t.agree++
		}
	}
	t.positions += len(ref.want)
	if slices.Equal(gen, ref.greedy) {
		t.same++
	}
	t.cases++
}

func (t tally) row(setting string, tg Targets) Row {
	r := Row{Setting: setting}
	if t.positions > 0 {
		r.Top1 = float64(t.agree) / float64(t.positions)
	}
	if t.cases > 0 {
		r.Greedy = float64(t.same) / float64(t.cases)
	}
	if t.chunkToks > 0 {
		r.Recomputed = float64(t.redo) / float64(t.chunkToks)
	}
	if t.blobBytes > 0 {
		r.Ratio = float64(t.stateBytes) / float64(t.blobBytes)
	}
	r.Pass = r.Top1 >= tg.Top1 && r.Greedy >= tg.Greedy
	return r
}

// calibration is one Calibrate run's engine, sequences and samples: seq
// holds each reference and then each setting compared with it; scr is
// composition's scratch sequence.
type calibration struct {
	eng      *runtime.Engine
	o        Options
	seq, scr int
	pre      runtime.Preamble
	mems     []runtime.Chunk
	samples  []sample
	refs     []reference
	kv       runtime.KVConfig
}

// Calibrate measures the settings o asks for on eng and returns the
// decision (Key is left to the caller). It takes one of eng's sequences
// for its run (AcquireSeq, waiting for it), and with o.Compose a second
// one, free now (TryAcquireSeq), as composition's scratch; it leaves them
// empty. Composition
// needs eng loaded with Options.BlendProbe (or under a ShiftGuard, which
// recomputes moved chunks whole); without, its rows carry the error and
// composition is off. Errors: ErrBadOptions, ErrNoSeq, ctx's, the
// engine's.
func Calibrate(ctx context.Context, eng *runtime.Engine, o Options) (Decision, error) {
	start := time.Now()
	o.Samples, o.Targets = o.Samples.WithDefaults(), o.Targets.WithDefaults()
	if err := errors.Join(o.Samples.Validate(), o.Targets.Validate()); err != nil {
		return Decision{}, err
	}
	d := Decision{Targets: o.Targets, Samples: o.Samples}
	c := &calibration{eng: eng, o: o, kv: eng.KVConfig()}
	var seqs []int
	defer func() {
		for _, s := range seqs {
			eng.ClearSeq(s)
			eng.ReleaseSeq(s)
		}
	}()
	s, err := eng.AcquireSeq(ctx)
	if err != nil {
		return d, err
	}
	seqs = append(seqs, s)
	c.seq = s
	if o.Compose {
		s, ok := eng.TryAcquireSeq()
		if !ok {
			return d, ErrNoSeq
		}
		seqs = append(seqs, s)
		c.scr = s
	}
	if err := c.prepare(ctx); err != nil {
		return d, err
	}
	if o.Compose {
		d.Composed = true
		for _, f := range Fractions {
			if f > o.Targets.Ceiling {
				break
			}
			r, err := c.compose(ctx, f)
			if err != nil {
				return d, err
			}
			d.Compose = append(d.Compose, r)
			if r.Pass && !d.ComposeOn {
				d.ComposeOn, d.Ratio = true, f
			}
		}
	}
	if o.Codecs {
		d.Codec = CodecExact
		for _, codec := range append([]string{CodecExact}, lossyCodecs...) {
			r, err := c.codec(ctx, codec)
			if err != nil {
				return d, err
			}
			d.Codecs = append(d.Codecs, r)
			if r.Pass && d.Codec == CodecExact && codec != CodecExact {
				d.Codec = codec
			}
		}
	}
	d.Took = time.Since(start).Seconds()
	d.At = time.Now().UTC()
	return d, nil
}

// prepare generates the memories from the seeds, prefills each as a
// chunk after the BOS preamble, builds the samples and their references.
func (c *calibration) prepare(ctx context.Context) error {
	s, eng := c.o.Samples, c.eng
	var err error
	if c.pre, err = eng.PrefillPreamble(ctx, c.seq, []runtime.Token{eng.BOS()}); err != nil {
		return err
	}
	var texts [][]runtime.Token
	for i := range s.N {
		seed, err := eng.Tokenize(seeds[i%len(seeds)], false)
		if err != nil {
			return err
		}
		prompt := append([]runtime.Token{eng.BOS()}, seed...)
		eng.ClearSeq(c.seq)
		res, err := eng.Generate(ctx, runtime.Request{Seq: c.seq, Tokens: prompt, MaxTokens: max(1, s.ChunkTokens-len(seed))})
		if err != nil {
			return err
		}
		toks := append(slices.Clone(seed), res.Tokens...)
		mem, err := eng.PrefillChunk(ctx, c.seq, c.pre, toks)
		if err != nil {
			return err
		}
		texts = append(texts, toks)
		c.mems = append(c.mems, mem)
	}
	for j := range s.N {
		var sm sample
		for k := range s.Chunks {
			sm.chunks = append(sm.chunks, (j+k)%s.N)
		}
		q := texts[(j+s.Chunks)%s.N]
		sm.query = slices.Clone(q[:min(len(q), s.QueryTokens)])
		ref, err := c.reference(ctx, sm)
		if err != nil {
			return err
		}
		c.samples = append(c.samples, sm)
		c.refs = append(c.refs, ref)
	}
	return nil
}

// reference prefills a sample in full: its greedy path, the argmax of the
// forced rows (query and the path but its last token) and the state.
func (c *calibration) reference(ctx context.Context, sm sample) (reference, error) {
	eng := c.eng
	r := reference{full: slices.Clone(c.pre.Tokens)}
	for _, i := range sm.chunks {
		r.full = append(r.full, c.mems[i].Tokens...)
	}
	r.n = len(r.full)
	r.full = append(r.full, sm.query...)
	eng.ClearSeq(c.seq)
	res, err := eng.Generate(ctx, runtime.Request{Seq: c.seq, Tokens: r.full, MaxTokens: c.o.Samples.Greedy})
	if err != nil {
		return r, err
	}
	r.greedy = res.Tokens
	r.forced = append(slices.Clone(sm.query), r.greedy[:max(0, len(r.greedy)-1)]...)
	if err := eng.TruncateSeq(c.seq, r.n); err != nil {
		return r, err
	}
	if r.state, err = eng.SaveSeq(c.seq); err != nil {
		return r, err
	}
	if r.want, err = eng.ArgmaxAt(ctx, c.seq, r.forced, r.n); err != nil {
		return r, err
	}
	return r, eng.ClearSeq(c.seq)
}

// measure compares c.seq, which holds a sample's first ref.n tokens, with
// the reference and empties it.
func (c *calibration) measure(ctx context.Context, t *tally, ref reference) error {
	eng := c.eng
	defer eng.ClearSeq(c.seq)
	got, err := eng.ArgmaxAt(ctx, c.seq, ref.forced, ref.n)
	if err != nil {
		return err
	}
	if err := eng.TruncateSeq(c.seq, ref.n); err != nil {
		return err
	}
	res, err := eng.Generate(ctx, runtime.Request{Seq: c.seq, Tokens: ref.full, NPast: ref.n, MaxTokens: c.o.Samples.Greedy})
	if err != nil {
		return err
	}
	t.add(ref, got, res.Tokens)
	return nil
}

// compose measures composition at recompute fraction f (0: shift only).
// A composition the engine refuses (ErrBadOptions: no BlendProbe) is a
// failed row carrying the reason.
func (c *calibration) compose(ctx context.Context, f float64) (Row, error) {
	o := runtime.ComposeOptions{Ratio: f}
	if f == 0 {
		o.Ratio = -1 // shift only
	}
	var t tally
	for i, sm := range c.samples {
		var chunks []runtime.Chunk
		for _, k := range sm.chunks {
			chunks = append(chunks, c.mems[k])
		}
		res, err := c.eng.ComposeSeq(ctx, c.seq, []int{c.scr}, c.pre, chunks, o)
		if errors.Is(err, runtime.ErrBadOptions) || errors.Is(err, runtime.ErrCompose) {
			return Row{Setting: fmt.Sprintf("compose %.2f", f), Fraction: f, Err: err.Error()}, nil
		}
		if err != nil {
			return Row{}, err
		}
		t.redo += res.Recomputed
		t.chunkToks += res.ChunkTokens
		if err := c.measure(ctx, &t, c.refs[i]); err != nil {
			return Row{}, err
		}
	}
	r := t.row(fmt.Sprintf("compose %.2f", f), c.o.Targets)
	r.Fraction = f
	return r, nil
}

// codec measures a pack codec: each reference state encoded as a blob
// under it, decoded (dequantized), restored and compared.
func (c *calibration) codec(ctx context.Context, codec string) (Row, error) {
	var t tally
	for _, ref := range c.refs {
		h := kvcache.Header{KV: c.kv, Tokens: ref.full[:ref.n]}
		if p, ok := Params(codec); ok {
			h.Lossy = &p
		}
		blob, err := kvcache.Encode(h, ref.state)
		if err != nil {
			return Row{}, err
		}
		dh, state, err := kvcache.Decode(blob)
		if err != nil {
			return Row{}, err
		}
		if codec != CodecExact && dh.Lossy == nil {
			return Row{Setting: codec, Err: fmt.Sprintf("KV types %s/%s: only f16 K and V are quantized", c.kv.TypeK, c.kv.TypeV)}, nil
		}
		t.stateBytes += int64(len(ref.state))
		t.blobBytes += int64(len(blob))
		if _, err := c.eng.RestoreSeq(c.seq, state); err != nil {
			return Row{}, err
		}
		if err := c.measure(ctx, &t, ref); err != nil {
			return Row{}, err
		}
	}
	return t.row(codec, c.o.Targets), nil
}
