package kvgate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
)

// keyPrefix holds decisions: g/<model key>/<targets key> → Decision JSON.
const keyPrefix = "g/"

// Key is the model key a decision is made for: the model's fingerprint,
// its KV types and the adapter set's key (runtime.AdapterKey; "" none).
// n_ctx is left out: agreement does not depend on it.
func Key(kv runtime.KVConfig, adapterKey string) string {
	a := "none"
	if adapterKey != "" {
		s := sha256.Sum256([]byte(adapterKey))
		a = hex.EncodeToString(s[:8])
	}
	return fmt.Sprintf("%s/%s-%s/%s", kv.ModelFingerprint, kv.TypeK, kv.TypeV, a)
}

// GateOptions configure a Gate. Zero means the default given.
type GateOptions struct {
	// Codec is the store's codec setting: CodecExact (default), CodecAuto,
	// CodecQ8 or CodecQ4. Under CodecExact nothing is calibrated for the
	// store.
	Codec string
	// Compose calibrates composition too (the pipeline composes).
	Compose bool
	// Targets a setting must meet (defaults: Targets.WithDefaults).
	Targets Targets
	// Samples shape the calibration (defaults: Samples.WithDefaults).
	Samples Samples
	// Logger receives one line per decision made; nil discards.
	Logger *slog.Logger
}

// Validate reports every bad field at once.
func (o GateOptions) Validate() error {
	var errs []error
	switch o.Codec {
	case "", CodecExact, CodecAuto, CodecQ8, CodecQ4:
	default:
		errs = append(errs, fmt.Errorf("%w: kv codec %q, want exact, auto, q8 or q4", ErrBadOptions, o.Codec))
	}
	return errors.Join(append(errs, o.Targets.WithDefaults().Validate(), o.Samples.WithDefaults().Validate())...)
}

// Gate holds the decisions per model key and runs the calibrations.
type Gate struct {
	db   *datadir.DB // nil: decisions kept in memory only
	opts GateOptions
	log  *slog.Logger
	tkey string // the targets' and settings' part of the stored key

	ctx    context.Context // background calibrations; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	calibrations atomic.Int64 // calibrations run since Open

	// mu guards decided, running and closed.
	mu      sync.Mutex
	decided map[string]Decision // by model key
	running map[string]bool
	closed  bool
}

// Open returns a gate over db (nil: in memory) with the decisions stored
// there for opts' targets and settings. Errors: ErrBadOptions, storage.
func Open(db *datadir.DB, opts GateOptions) (*Gate, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Codec == "" {
		opts.Codec = CodecExact
	}
	opts.Targets, opts.Samples = opts.Targets.WithDefaults(), opts.Samples.WithDefaults()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tk, _ := json.Marshal(struct {
		T       Targets
		S       Samples
		Compose bool
		Codecs  bool
	}{opts.Targets, opts.Samples, opts.Compose, opts.Codec != CodecExact})
	s := sha256.Sum256(tk)
	g := &Gate{db: db, opts: opts, log: log, tkey: hex.EncodeToString(s[:8]), decided: map[string]Decision{}, running: map[string]bool{}}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	if db == nil {
		return g, nil
	}
	err := db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyPrefix), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := string(it.Item().Key())
			if len(k) < len(g.tkey) || k[len(k)-len(g.tkey):] != g.tkey {
				continue // made for other targets or settings
			}
			var d Decision
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &d) }); err != nil {
				log.Warn("kvgate: unreadable decision skipped", "key", k, "err", err)
				continue
			}
			g.decided[d.Key] = d
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kvgate: open: %w", err)
	}
	return g, nil
}

// Options returns the gate's options, defaults filled.
func (g *Gate) Options() GateOptions { return g.opts }

// Calibrations returns how many calibrations ran since Open (a decision
// read back from the data directory is not one).
func (g *Gate) Calibrations() int64 { return g.calibrations.Load() }

// Decision returns the decision for key, ok false before one is made.
func (g *Gate) Decision(key string) (Decision, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d, ok := g.decided[key]
	return d, ok
}

// Decisions returns every decision the gate holds, by model key.
func (g *Gate) Decisions() map[string]Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]Decision, len(g.decided))
	for k, d := range g.decided {
		out[k] = d
	}
	return out
}

// ComposeRatio returns the recompute fraction composition may use for
// the model key, ok false when it must not compose: not calibrated yet
// (run exact: prefill), or no fraction up to the ceiling met the targets,
// or the gate does not calibrate composition. A fraction of 0 means shift
// only: runtime.ComposeOptions{Ratio: -1} (a zero Ratio there is the
// default, 0.15). It has the signature of the pipeline's ComposeRatio
// hook.
func (g *Gate) ComposeRatio(key string) (float64, bool) {
	d, ok := g.Decision(key)
	if !ok || !d.Composed || !d.ComposeOn {
		return 0, false
	}
	return d.Ratio, true
}

// Codec returns the codec packs of the model key are stored with and ok
// true once that is decided: exact under the setting exact; else, after
// calibration, the setting itself when it passed (auto: the smallest
// passing codec), exact when it did not. ok false: not calibrated yet
// (store exact).
func (g *Gate) Codec(key string) (string, bool) {
	if g.opts.Codec == CodecExact {
		return CodecExact, true
	}
	d, ok := g.Decision(key)
	if !ok || d.Codec == "" {
		return CodecExact, false
	}
	if g.opts.Codec == CodecAuto {
		return d.Codec, true
	}
	if d.Passes(g.opts.Codec) {
		return g.opts.Codec, true
	}
	return CodecExact, true
}

// Lossy returns the quantization a pack of the model key is stored with
// (kvcache.WarmOptions.Lossy), nil for exact, not calibrated included.
func (g *Gate) Lossy(key string) *kvcache.LossyParams {
	if g == nil {
		return nil
	}
	c, _ := g.Codec(key)
	p, ok := Params(c)
	if !ok {
		return nil
	}
	return &p
}

// needed reports whether the gate has anything to calibrate.
func (g *Gate) needed() bool { return g.opts.Compose || g.opts.Codec != CodecExact }

// Start calibrates key on eng in the background unless it is decided,
// running, or there is nothing to calibrate; it returns at once. The
// decision is stored and logged when made; a failed calibration is
// logged and tried again at the next Start.
func (g *Gate) Start(key string, eng *runtime.Engine) {
	if g == nil || !g.needed() {
		return
	}
	g.mu.Lock()
	_, done := g.decided[key]
	if done || g.running[key] || g.closed {
		g.mu.Unlock()
		return
	}
	g.running[key] = true
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		if _, err := g.calibrate(g.ctx, key, eng); err != nil && g.ctx.Err() == nil {
			g.log.Warn("kvgate: calibration failed; running exact", "model", key, "err", err)
		}
	}()
}

// Calibrate returns key's decision, calibrating on eng now when there is
// none (memosrt calibrate, tests; serving uses Start). It does not wait
// for a background calibration of the same key: it runs its own, and the
// later of the two decisions is kept. Errors: ErrClosed, Calibrate's,
// storage.
func (g *Gate) Calibrate(ctx context.Context, key string, eng *runtime.Engine) (Decision, error) {
	if d, ok := g.Decision(key); ok {
		return d, nil
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return Decision{}, ErrClosed
	}
	g.running[key] = true
	g.mu.Unlock()
	return g.calibrate(ctx, key, eng)
}

// calibrate runs one calibration of key (marked running by the caller),
// stores and logs its decision.
func (g *Gate) calibrate(ctx context.Context, key string, eng *runtime.Engine) (Decision, error) {
	defer func() {
		g.mu.Lock()
		delete(g.running, key)
		g.mu.Unlock()
	}()
	g.calibrations.Add(1)
	d, err := Calibrate(ctx, eng, Options{Samples: g.opts.Samples, Targets: g.opts.Targets,
		Compose: g.opts.Compose, Codecs: g.opts.Codec != CodecExact})
	if err != nil {
		return d, err
	}
	d.Key = key
	if g.db != nil {
		v, _ := json.Marshal(d)
		k := []byte(keyPrefix + key + "/" + g.tkey)
		if err := g.db.Write(int64(len(k)+len(v)), func(txn *bg.Txn) error { return txn.Set(k, v) }); err != nil {
			return d, fmt.Errorf("kvgate: store decision: %w", err)
		}
	}
	g.mu.Lock()
	g.decided[key] = d
	g.mu.Unlock()
	codec, _ := g.Codec(key)
	g.log.Info("kvgate: calibrated", "model", key, "compose", d.ComposeOn, "compose_ratio", d.Ratio,
		"codec_setting", g.opts.Codec, "codec", codec, "auto", d.Codec, "took_s", d.Took)
	return d, nil
}

// Wait waits for the background calibrations running now to end.
func (g *Gate) Wait() { g.wg.Wait() }

// Close cancels background calibrations and waits for them. Idempotent.
func (g *Gate) Close() error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
	return nil
}

// Status is what the gate shows for one model key (memosrt tiers, the
// inspector, /api/show).
type Status struct {
	Key     string `json:"key"`
	Setting string `json:"setting"` // the codec setting (GateOptions.Codec)
	// Calibrated: a decision is made (until then everything runs exact).
	Calibrated bool `json:"calibrated"`
	// Codec is what packs of the key are stored with now.
	Codec string `json:"codec"`
	// Compose and ComposeRatio are ComposeRatio's answer.
	Compose      bool    `json:"compose"`
	ComposeRatio float64 `json:"compose_ratio,omitempty"`
	// Decision is the calibration's table (nil before it).
	Decision *Decision `json:"decision,omitempty"`
}

// Status returns the gate's view of key.
func (g *Gate) Status(key string) Status {
	st := Status{Key: key, Setting: g.opts.Codec}
	st.Codec, _ = g.Codec(key)
	st.ComposeRatio, st.Compose = g.ComposeRatio(key)
	if d, ok := g.Decision(key); ok {
		st.Calibrated, st.Decision = true, &d
	}
	return st
}
