package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/internal/defaults"
	"github.com/memosrt/memosrt/internal/ollamastore"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/pipeline/convpack"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/grammar"
	"github.com/memosrt/memosrt/runtime/llama"
)

// engineFlags are the load-time flags shared by commands that load a model.
type engineFlags struct {
	fs      *pflag.FlagSet
	model   *string
	threads *int
	ctx     *int
	ngl     *int
	typeK   *string
	typeV   *string
	fa      *string
	mmap    *bool
	// raisedCtx: the command raised *ctx above --ctx (bench ttft), so a
	// capped n_ctx is worth saying as when --ctx is given
	raisedCtx bool
}

func addEngineFlags(fs *pflag.FlagSet) engineFlags {
	f := engineFlags{
		fs:      fs,
		model:   fs.String("model", "", "GGUF model file `PATH`, or an Ollama model NAME[:TAG] (llama3.2:1b) in $OLLAMA_MODELS (default $MEMOSRT_MODEL)"),
		threads: fs.Int("threads", 0, "CPU threads `N` (0: all)"),
		ctx:     fs.Int("ctx", 4096, "context size n_ctx, `TOKENS` (capped at the model's training context)"),
		ngl:     fs.Int("ngl", -1, "`LAYERS` to offload to a GPU (-1: all when a GPU is present)"),
		typeK:   fs.String("type-k", "f16", "KV cache K `TYPE`: f16, f32, q8_0, q4_0"),
		typeV:   fs.String("type-v", "f16", "KV cache V `TYPE`: f16, f32, q8_0, q4_0"),
		fa:      fs.String("flash-attn", "auto", "flash attention `MODE`: auto, on, off"),
		mmap:    fs.Bool("mmap", false, "map the model file instead of reading it: faster load, pages shared between processes, slower CPU decode (see docs/design.md)"),
	}
	envDefault(fs, "model", "MEMOSRT_MODEL")
	return f
}

// check range-checks the engine flags (before anything is opened).
func (f engineFlags) check(cmd *cobra.Command) error {
	kv := func(t string) bool { return t == "f16" || t == "f32" || t == "q8_0" || t == "q4_0" }
	return checkFlags(cmd,
		check{"threads", *f.threads >= 0 && *f.threads <= 512, "0 (all CPUs) to 512"},
		check{"ctx", *f.ctx == 0 || *f.ctx >= 8, "8 or more tokens"},
		check{"ngl", *f.ngl >= -1, "-1 (all layers) or more"},
		check{"type-k", kv(*f.typeK), "f16, f32, q8_0 or q4_0"},
		check{"type-v", kv(*f.typeV), "f16, f32, q8_0 or q4_0"},
		check{"flash-attn", *f.fa == "auto" || *f.fa == "on" || *f.fa == "off", "auto, on or off"})
}

// sayCapped prints, once, that the n_ctx asked for (--ctx, or raised by
// the command) was more than the model's training context and what was
// loaded instead.
func (f engineFlags) sayCapped(loaded int) {
	if loaded > 0 && loaded < *f.ctx && (f.raisedCtx || f.fs.Changed("ctx")) {
		fmt.Fprintf(os.Stderr, "memosrt: --ctx %d capped at the model's training context, %d tokens\n", *f.ctx, loaded)
	}
}

// engineOptions returns the runtime options of the flags (ModelPath set)
// and the name to serve the model under: "" for a file (the OS names it
// after the file), the Ollama name for a model found in Ollama's store.
func (f engineFlags) engineOptions() (runtime.Options, string, error) {
	if *f.model == "" {
		return runtime.Options{}, "", errors.New("--model is required (or set MEMOSRT_MODEL)")
	}
	// before any data directory is opened: a wrong path fails first and alone
	path, name, err := resolveModel(*f.model)
	if err != nil {
		return runtime.Options{}, "", err
	}
	if _, err := runtime.CheckModelFile(path); err != nil {
		return runtime.Options{}, "", err // not GGUF, truncated, vocab-only
	}
	llama.Init(libDir())
	return runtime.Options{ModelPath: path, LibDir: libDir(), NGPULayers: llama.GPULayers(*f.ngl),
		NCtx: *f.ctx, Threads: *f.threads, TypeK: *f.typeK, TypeV: *f.typeV,
		FlashAttn: *f.fa, Mmap: *f.mmap, LoRA: true, Logger: logger(), Progress: cli.Progress("loading model")}, name, nil
}

// ollamaModels is Ollama's model store: $OLLAMA_MODELS, else
// ~/.ollama/models (Ollama envconfig.Models).
func ollamaModels() string {
	if d := os.Getenv("OLLAMA_MODELS"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".ollama", "models")
	}
	return filepath.Join(home, ".ollama", "models")
}

// resolveModel is ollamastore.ResolveModel in Ollama's store.
func resolveModel(v string) (path, name string, err error) {
	return ollamastore.ResolveModel(ollamaModels(), v)
}

// load loads an engine alone (benchmarks).
func (f engineFlags) load(ctx context.Context, nseq int) (*runtime.Engine, error) {
	o, _, err := f.engineOptions()
	if err != nil {
		return nil, err
	}
	o.NSeqMax = nseq
	return runtime.Load(ctx, o)
}

// apply puts the model and engine flags into OS options.
func (f engineFlags) apply(o *memosrt.Options) error {
	e, name, err := f.engineOptions()
	if err != nil {
		return err
	}
	o.Model, o.Engine = e.ModelPath, e
	if o.ModelName == "" {
		o.ModelName = name // --name wins
	}
	return nil
}

func newKVCmd() *cobra.Command {
	return cli.Group("kv", "Activation tier: warm a cube's pack, list packs", newKVWarmCmd(), newKVLsCmd())
}

func newKVLsCmd() *cobra.Command {
	c := &cobra.Command{Use: "ls", Short: "List the stored KV packs", Args: cli.NoArgs}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	cube := addCubeFlag(fs, "only the packs of cube `NAME`")
	asJSON := fs.Bool("json", false, "print JSON")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		sf.existing = true
		s, err := sf.open(ctx, nil)
		if err != nil {
			return err
		}
		defer s.Close(context.WithoutCancel(ctx))
		infos, err := s.AllPacks(ctx)
		if err != nil {
			return err
		}
		if *cube != "" {
			infos = slices.DeleteFunc(infos, func(i kvcache.Info) bool { c, _ := convpack.PackCube(i.Label); return c != *cube })
		}
		if *asJSON {
			if infos == nil {
				infos = []kvcache.Info{}
			}
			return json.NewEncoder(os.Stdout).Encode(infos)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PACK\tCUBE\tKIND\tTOKENS\tRAW\tSTORED\tRATIO\tCREATED")
		for _, i := range infos {
			c, kind := convpack.PackCube(i.Label)
			if c == "" {
				c = "(no cube)"
			}
			if i.Composed != nil {
				kind += " (composed)" // from its members' chunks: approximate
			}
			fmt.Fprintf(tw, "%.12s\t%s\t%s\t%d\t%s\t%s\t%.2fx\t%s\n", i.ID, c, kind, i.NTokens, cli.Bytes(i.RawBytes), cli.Bytes(i.BlobBytes), i.Ratio(), i.Created.Format("2006-01-02 15:04:05"))
		}
		return tw.Flush()
	}
	return c
}

func newKVWarmCmd() *cobra.Command {
	c := &cobra.Command{Use: "warm", Short: "Prefill a cube's memories into its KV pack and store it (compressed)", Args: cli.NoArgs}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	cube := addCubeFlag(fs, "memory cube `NAME` whose pack to warm")
	resident := fs.Bool("resident", false, "also keep the pack resident in the KV cache (a running server)")
	asJSON := fs.Bool("json", false, "print JSON")
	ef := addEngineFlags(fs)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if err := checkCube(*cube, true); err != nil {
			return err
		}
		if err := ef.check(cmd); err != nil {
			return err
		}
		s, err := sf.open(ctx, &ef)
		if err != nil {
			return err
		}
		defer s.Close(context.WithoutCancel(ctx))
		if cli.IsTerminal(os.Stderr) {
			fmt.Fprintf(os.Stderr, "warming the pack of cube %s (prefill, then compress and store)...", *cube)
		}
		st, err := s.Warm(ctx, *cube, memosrt.WarmOptions{Resident: *resident})
		if cli.IsTerminal(os.Stderr) {
			fmt.Fprint(os.Stderr, "\r\033[K")
		}
		if err != nil {
			return err
		}
		var info kvcache.Info
		for _, p := range st.Packs {
			if p.Label == *cube && p.Created.After(info.Created) {
				info = p
			}
		}
		if *asJSON {
			return json.NewEncoder(os.Stdout).Encode(map[string]any{"pack": info, "memories": st.Memories, "ratio": info.Ratio()})
		}
		fmt.Printf("warmed cube %s: %d memories, %d tokens, %s state → %s stored (%.2fx), pack %.12s\n",
			*cube, st.Memories, info.NTokens, cli.Bytes(info.RawBytes), cli.Bytes(info.BlobBytes), info.Ratio(), info.ID)
		return nil
	}
	return c
}

// runJSON is the object `memosrt run --json` prints.
type runJSON struct {
	Response     string  `json:"response"`
	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	TTFTms       float64 `json:"ttft_ms"`
	EvalTokens   int     `json:"eval_tokens"`
	EvalMs       float64 `json:"eval_ms"`
	TokensPerSec float64 `json:"eval_tokens_per_s"`
	DoneReason   string  `json:"done_reason"`
	PackID       string  `json:"pack_id,omitempty"`
	PackMemories int     `json:"pack_memories"`
	Retrieved    int     `json:"retrieved_memories"`
	RestoreMs    float64 `json:"restore_ms"`
	Refused      string  `json:"refused,omitempty"`
	CacheSource  string  `json:"cache_source,omitempty"`
}

func newRunCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "run PROMPT",
		Short: "Generate from a prompt, with a cube's memories (restored from its KV pack) or plain",
		Long: "Generate from PROMPT. With --cube the prompt carries the cube's memories, their KV state restored\n" +
			"from the cube's pack when one is stored; without --cube it is plain inference and needs no --db.\n" +
			"With a memosrt serve running on --db, the server serves the request: with the --model file when it\n" +
			"serves that file, else with its own model.",
		Args: cli.ExactArgs(1, "one PROMPT argument"),
	}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	sf.oneSeq = true // one request, no tier jobs: no unified KV cache (docs/benchmarks.md)
	cube := addCubeFlag(fs, "memory cube `NAME` whose memories the prompt carries (default: none, plain inference)")
	temp := fs.Float64("temperature", defaults.CLI.Temperature, "sampling temperature `T` (0: greedy)")
	seed := fs.Uint("seed", 0, "sampling seed `N`")
	topK := fs.Int("top-k", defaults.CLI.TopK, "top-k `K` (with temperature > 0; 0: off)")
	topP := fs.Float64("top-p", defaults.CLI.TopP, "top-p `P` (with temperature > 0; 1: off)")
	minP := fs.Float64("min-p", defaults.CLI.MinP, "min-p `P` (with temperature > 0; 0: off)")
	rep := fs.Float64("repeat-penalty", defaults.CLI.RepeatPenalty, "repeat penalty `R` (1: off)")
	n := fs.Int("num-predict", 128, "max `TOKENS` to generate (-1: no cap, -2: fill the context)")
	noCache := fs.Bool("no-cache", false, "skip the activation tier: prefill the whole prompt")
	asJSON := fs.Bool("json", false, "print one JSON object instead of streaming text")
	format := fs.String("format", "", "structured output `FORMAT`: json, a JSON schema, or @FILE holding one (as Ollama's format)")
	var loras loraFlag
	fs.Var(&loras, "lora", "LoRA adapter `NAME[:SCALE]` (repeatable, or comma-separated; none: no adapter, not even the cube's defaults)")
	ef := addEngineFlags(fs)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if err := checkFlags(cmd,
			check{"temperature", *temp >= 0, "0 (greedy) or more"},
			check{"top-k", *topK >= 0, "0 (off) or more"},
			check{"top-p", *topP >= 0 && *topP <= 1, "0 to 1"},
			check{"min-p", *minP >= 0 && *minP <= 1, "0 to 1"},
			check{"repeat-penalty", *rep > 0, "more than 0 (1: off)"},
			check{"num-predict", *n >= -2, "-2 or more (-1: no cap, -2: fill the context)"}); err != nil {
			return err
		}
		if err := ef.check(cmd); err != nil {
			return err
		}
		if err := checkCube(*cube, false); err != nil {
			return err
		}
		gram, err := formatGrammar(*format)
		if err != nil {
			return err
		}
		if *sf.db == "" && *cube == "" {
			// plain inference needs no data directory (as llama-cli): a scratch
			// one holds nothing past this run
			tmp, err := os.MkdirTemp("", "memosrt-run-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			*sf.db = tmp
		}
		s, err := sf.open(ctx, &ef) // a running server serves the request, with --model when it serves that file
		if err != nil {
			return err
		}
		defer s.Close(context.WithoutCancel(ctx))
		req := memosrt.Request{Cube: *cube, Prompt: args[0], NoCache: *noCache, NumPredict: *n, Adapters: loras.adapterSpecs(),
			Sampling: memosrt.Sampling{Temperature: float32(*temp), Seed: uint32(*seed), TopK: *topK,
				TopP: float32(*topP), MinP: float32(*minP), RepeatPenalty: float32(*rep), Grammar: gram}}
		if !*asJSON {
			req.OnText = func(s string) error { _, err := os.Stdout.WriteString(s); return err }
		}
		res, err := s.Generate(ctx, req)
		if err != nil {
			return err
		}
		if !*asJSON {
			fmt.Println()
			return nil
		}
		ms := func(d interface{ Seconds() float64 }) float64 { return float64(int64(d.Seconds()*1e6)) / 1e3 }
		u := res.Usage
		out := runJSON{Response: res.Text, PromptTokens: u.PromptTokens, CachedTokens: u.CachedTokens,
			TTFTms: ms(u.TTFT), EvalTokens: u.EvalTokens, EvalMs: ms(u.EvalDuration), DoneReason: res.DoneReason,
			PackID: res.PackID, PackMemories: res.PackMemories, Retrieved: res.Retrieved,
			RestoreMs: ms(u.RestoreTime), Refused: res.Refused, CacheSource: res.CacheSource}
		if u.EvalDuration > 0 {
			out.TokensPerSec = float64(u.EvalTokens) / u.EvalDuration.Seconds()
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(out)
	}
	return c
}

// formatGrammar turns --format into a GBNF grammar: "" none, "json" any JSON
// object, "{...}" an inline JSON schema, "@FILE" a schema read from FILE.
func formatGrammar(f string) (string, error) {
	switch {
	case f == "":
		return "", nil
	case f == "json":
		return grammar.JSON, nil
	case strings.HasPrefix(f, "@"):
		b, err := os.ReadFile(f[1:])
		if err != nil {
			return "", fmt.Errorf("--format: %w", err)
		}
		f = string(b)
	}
	if !strings.HasPrefix(strings.TrimSpace(f), "{") {
		return "", fmt.Errorf("--format: want json, a JSON schema object or @FILE, got %.40q", f)
	}
	g, err := grammar.FromSchema([]byte(f))
	if err != nil {
		return "", fmt.Errorf("--format: %w", err)
	}
	return g, nil
}
